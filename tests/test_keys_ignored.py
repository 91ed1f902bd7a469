"""Private keys are not one `git add .` from being published (issue 40, item 11): the keys and
signatures docs/deployment.md writes are ignored like the models beside them, and `dlcourse
keygen` warns when it writes into a git work tree that does not ignore the folder."""
import shutil
import subprocess
from pathlib import Path

import pytest

from dlcourse import cli

REPO = Path(__file__).resolve().parents[1]
needs_crypto = pytest.mark.skipif(
    __import__("importlib").util.find_spec("cryptography") is None,
    reason="keygen needs cryptography: pip install -e '.[protect]'")
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def ignored(root: Path, *paths) -> set:
    """The paths (relative to root) that root's .gitignore ignores, as git decides."""
    r = subprocess.run(["git", "-C", str(root), "check-ignore", "--no-index", *paths],
                       capture_output=True, text=True, timeout=30)
    return set(r.stdout.split())


@needs_git
def test_keys_and_signatures_are_ignored_like_the_models_beside_them(tmp_path):
    root = tmp_path / "checkout"                 # the repository's .gitignore, in a fresh repo
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True, timeout=30)
    shutil.copy(REPO / ".gitignore", root / ".gitignore")
    written = ["cnn.npz", "cnn.onnx", "cnn.npz.sig", "keys/model_signing.key",
               "keys/model_signing.pub", "keys/model.aeskey", "models/lm.npz.sig"]
    assert ignored(root, *written) == set(written)


@needs_crypto
def test_keygen_in_a_git_work_tree_warns(tmp_path, capsys):
    (tmp_path / ".git").mkdir()                  # a work tree (git itself not needed)
    assert cli.main(["keygen", str(tmp_path / "secrets")]) == 0
    captured = capsys.readouterr()
    assert "wrote" in captured.out
    assert "keygen: warning:" in captured.err and "git work tree" in captured.err
    assert "secrets/ to" in captured.err and ".gitignore" in captured.err


@needs_crypto
def test_keygen_outside_a_work_tree_says_nothing_more(tmp_path, capsys):
    assert cli.main(["keygen", str(tmp_path / "keys"), "--aes"]) == 0
    assert "warning" not in capsys.readouterr().err


@needs_crypto
@needs_git
def test_keygen_into_an_ignored_folder_does_not_warn(tmp_path, capsys):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, timeout=30)
    (tmp_path / ".gitignore").write_text("keys/\n")
    assert cli.main(["keygen", str(tmp_path / "keys")]) == 0
    assert "warning" not in capsys.readouterr().err
