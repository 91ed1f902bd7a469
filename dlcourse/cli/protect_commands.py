"""``dlcourse keygen`` and ``sign`` (lesson 12b): a key pair for signing models or an AES key
for encrypting them, and the signature of a saved model (the ``[protect]`` extra)."""
from __future__ import annotations

import sys
from pathlib import Path

from .common import PROG


def add_commands(commands) -> None:
    keygen = commands.add_parser(
        "keygen", help="write a key pair for signing models, or an AES key for encrypting them",
        description="Write an Ed25519 key pair into DIR: model_signing.key (private, mode 0600: "
                    "signs) and model_signing.pub (public: verifies). With --aes, a 32-byte "
                    "AES-256 key, model.aeskey (mode 0600), for encrypted checkpoints. Never "
                    "overwrites a key. Needs: pip install -e \".[protect]\".")
    keygen.add_argument("dir", metavar="DIR")
    keygen.add_argument("--aes", action="store_true", help="an AES key instead of a key pair")
    keygen.set_defaults(run=_keygen)

    sign = commands.add_parser(
        "sign", help="sign a saved model (writes MODEL.npz.sig beside it)",
        description="Sign the exact bytes of MODEL.npz (encrypted or not) with an Ed25519 "
                    "private key; the signature goes beside it as MODEL.npz.sig. `dlcourse "
                    "serve/predict/export --public-key` and dl.load(path, public_key=...) then "
                    "refuse any file but one this key signed.")
    sign.add_argument("model", metavar="MODEL.npz")
    sign.add_argument("--key", required=True, metavar="PRIVATE_KEY",
                      help="the private key file (model_signing.key from `dlcourse keygen`)")
    sign.set_defaults(run=_sign)


def _keygen(args) -> int:
    from ..protect import keygen
    for path in keygen(args.dir, aes=args.aes):
        print(f"wrote {path}" + (" (private: keep it so, mode 0600)"
                                 if path.suffix in (".key", ".aeskey") else " (public)"))
    _warn_if_committable(Path(args.dir).expanduser())
    return 0


def _warn_if_committable(folder: Path) -> None:
    """Warn when ``folder`` lies in a git work tree and git does not ignore it: a private key
    there is one `git add .` away from being published."""
    import subprocess
    folder = folder.resolve()
    root = next((p for p in (folder, *folder.parents) if (p / ".git").exists()), None)
    if root is None:
        return
    try:
        ignored = subprocess.run(["git", "-C", str(root), "check-ignore", "-q", str(folder)],
                                 capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):      # no git: say it anyway
        ignored = False
    if not ignored:
        print(f"{PROG} keygen: warning: {folder} is inside the git work tree {root}, and git "
              f"does not ignore it: the private key could be committed. Add "
              f"{folder.relative_to(root).as_posix() or '.'}/ to {root / '.gitignore'}, or keep "
              f"keys outside the checkout.", file=sys.stderr)


def _sign(args) -> int:
    from ..protect import write_signature
    try:
        data = Path(args.model).read_bytes()            # (closes the file: no ResourceWarning)
    except FileNotFoundError:
        raise FileNotFoundError(f"No model at {args.model}.") from None
    print(f"wrote {write_signature(args.model, data, args.key)}")
    return 0
