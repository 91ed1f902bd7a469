"""Protecting a model (issue 33): signed checkpoints that prove who made them, encrypted ones
that only a key opens (dlcourse/protect.py), through dl.save/dl.load, the command line and a real
service on loopback."""
import json
import os
import stat
import subprocess
import sys
import urllib.request
import zipfile

import numpy as np
import pytest

import dlcourse as dl
from dlcourse import protect
from support.serve_tools import serve_load

pytest.importorskip("cryptography", reason="signing and encryption need the cryptography "
                                           "package: pip install -e '.[protect]'")
ProtectionError = protect.ProtectionError


@pytest.fixture()
def keys(tmp_path):
    """(private key, public key, AES key) files in a fresh folder, as `dlcourse keygen` writes
    them."""
    folder = tmp_path / "keys"
    private, public = protect.keygen(folder)
    (aes,) = protect.keygen(folder, aes=True)
    return private, public, aes


@pytest.fixture()
def model():
    return dl.MLP([6, 5, 3], seed=1)


def _same(a, b):
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    return np.array_equal(a.forward(x), b.forward(x))


def test_keygen_writes_private_keys_0600_and_never_overwrites(keys, tmp_path):
    private, public, aes = keys
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(aes).st_mode) == 0o600
    assert len(aes.read_bytes()) == 32 and b"PUBLIC KEY" in public.read_bytes()
    before = private.read_bytes()
    with pytest.raises(ProtectionError, match="never overwrites"):
        protect.keygen(private.parent)
    with pytest.raises(ProtectionError, match="never overwrites"):
        protect.keygen(private.parent, aes=True)
    assert private.read_bytes() == before


@pytest.mark.parametrize("sign, encrypt", [(True, False), (False, True), (True, True)])
def test_round_trips(model, keys, tmp_path, sign, encrypt):
    private, public, aes = keys
    path = dl.save(model, tmp_path / "m.npz", sign_with=private if sign else None,
                   encrypt_with=aes if encrypt else None)
    assert protect.signature_path(path).exists() == sign
    loaded = dl.load(path, key=aes if encrypt else None, public_key=public if sign else None)
    assert _same(model, loaded)


def test_nothing_changes_for_a_model_neither_signed_nor_encrypted(model, tmp_path):
    path = dl.save(model, tmp_path / "m.npz")
    assert zipfile.is_zipfile(path) and not protect.signature_path(path).exists()
    assert _same(model, dl.load(path))


def test_an_encrypted_file_holds_no_weight_bytes_and_a_fresh_nonce_each_save(model, keys,
                                                                            tmp_path):
    _, _, aes = keys
    a = dl.save(model, tmp_path / "a.npz", encrypt_with=aes).read_bytes()
    b = dl.save(model, tmp_path / "b.npz", encrypt_with=aes).read_bytes()
    assert a != b                                     # a new nonce, so new ciphertext
    header = json.loads(a.split(b"\n")[1])            # readable: format, version, key id, nonce
    assert header["cipher"] == "AES-256-GCM" and header["format"] == "dlcourse-encrypted"
    for name, w in model.state_dict().items():
        row = np.ascontiguousarray(w, dtype="<f4").tobytes()[:16]
        assert row not in a, f"{name}'s float32 bytes appear in the encrypted file"


def test_an_encrypted_file_without_a_key_says_so(model, keys, tmp_path, monkeypatch):
    _, _, aes = keys
    path = dl.save(model, tmp_path / "m.npz", encrypt_with=aes)
    monkeypatch.delenv(protect.ENV_KEY, raising=False)
    with pytest.raises(ProtectionError, match="encrypted: give its key"):
        dl.load(path)
    monkeypatch.setenv(protect.ENV_KEY, aes.read_bytes().hex())       # or from the environment
    assert _same(model, dl.load(path))


def test_a_wrong_key_is_a_wrong_key_and_a_damaged_file_is_damaged(model, keys, tmp_path):
    _, _, aes = keys
    (other,) = protect.keygen(tmp_path / "other", aes=True)
    path = dl.save(model, tmp_path / "m.npz", encrypt_with=aes)
    with pytest.raises(ProtectionError, match="wrong key"):
        dl.load(path, key=other)
    data = bytearray(path.read_bytes())
    data[-20] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(ProtectionError, match="damaged or was altered"):
        dl.load(path, key=aes)


def test_a_key_for_a_file_that_is_not_encrypted_is_refused(model, keys, tmp_path):
    """A plaintext file where an encrypted one is expected may be a swapped file."""
    path = dl.save(model, tmp_path / "m.npz")
    with pytest.raises(ProtectionError, match="not encrypted"):
        dl.load(path, key=keys[2])


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_a_key_others_can_read_is_refused(model, keys, tmp_path, mode):
    private, _, aes = keys
    path = dl.save(model, tmp_path / "m.npz", encrypt_with=aes)
    os.chmod(aes, mode)
    with pytest.raises(ProtectionError, match="readable by others.*chmod 600"):
        dl.load(path, key=aes)
    os.chmod(private, mode)
    with pytest.raises(ProtectionError, match="readable by others"):
        dl.save(model, tmp_path / "n.npz", sign_with=private)


def test_missing_signature_other_key_and_changed_bytes_are_refused(model, keys, tmp_path):
    private, public, _ = keys
    other_private, other_public = protect.keygen(tmp_path / "other")
    path = dl.save(model, tmp_path / "m.npz", sign_with=private)
    with pytest.raises(ProtectionError, match="signed by another key"):
        dl.load(path, public_key=other_public)
    unsigned = dl.save(model, tmp_path / "u.npz")
    with pytest.raises(ProtectionError, match="not signed"):
        dl.load(unsigned, public_key=public)
    # A forger who rewrites the weights AND the digest: the digest passes, the signature not.
    forged = dl.MLP([6, 5, 3], seed=2)
    dl.save(forged, path)                              # a valid checkpoint, new digest inside
    assert _same(forged, dl.load(path))                # the digest alone cannot tell
    with pytest.raises(ProtectionError, match="does not match its signature"):
        dl.load(path, public_key=public)


def test_encrypt_then_sign_is_checked_before_decrypting(model, keys, tmp_path):
    private, public, aes = keys
    path = dl.save(model, tmp_path / "m.npz", sign_with=private, encrypt_with=aes)
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(ProtectionError, match="does not match its signature"):
        dl.load(path, key=aes, public_key=public)


def dlcourse(*args, env=None):
    return subprocess.run([sys.executable, "-m", "dlcourse", *map(str, args)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def test_the_command_line_signs_encrypts_and_refuses_a_key_given_as_an_argument(model,
                                                                                tmp_path):
    folder = tmp_path / "k"
    r = dlcourse("keygen", folder)
    assert r.returncode == 0 and "model_signing.key" in r.stdout, r.stderr
    assert dlcourse("keygen", folder, "--aes").returncode == 0
    again = dlcourse("keygen", folder)
    assert again.returncode == 1 and "never overwrites" in again.stderr
    path = dl.save(model, tmp_path / "m.npz", encrypt_with=folder / "model.aeskey")
    r = dlcourse("sign", path, "--key", folder / "model_signing.key")
    assert r.returncode == 0 and "m.npz.sig" in r.stdout, r.stderr
    inputs = tmp_path / "x.npy"
    np.save(inputs, np.zeros((2, 6), np.float32))
    r = dlcourse("predict", path, inputs, "--key", folder / "model.aeskey",
                 "--public-key", folder / "model_signing.pub")
    assert r.returncode == 0 and "2 input(s)" in r.stdout, r.stderr
    r = dlcourse("predict", path, inputs, "--key", (folder / "model.aeskey").read_bytes().hex())
    assert r.returncode == 1 and "process lists" in r.stderr
    r = dlcourse("predict", path, inputs,
                 env={protect.ENV_KEY: (folder / "model.aeskey").read_bytes().hex()})
    assert r.returncode == 0, r.stderr


def test_a_signed_model_is_served_over_http_and_a_forged_one_refused_at_start(tmp_path):
    pytest.importorskip("fastapi", reason="the service needs FastAPI: pip install -e '.[serve]'")
    tools = serve_load()
    private, public = protect.keygen(tmp_path / "k")
    path = tools.digits_model(tmp_path / "mlp.npz")
    protect.write_signature(path, path.read_bytes(), private)
    port = tools.free_port()
    proc = tools.start_server(path, port, "--public-key", public)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=30) as r:
            assert json.loads(r.read())["status"] == "ok"
    finally:
        tools.stop_server(proc)
    dl.save(dl.MLP([64, 32, 10], seed=5), path)          # a forger's model, a valid checkpoint
    r = dlcourse("serve", path, "--port", "1", "--public-key", public)
    assert r.returncode == 1 and "refusing to serve" in r.stderr
    assert "does not match its signature" in r.stderr


def test_older_checkpoints_still_load_when_nothing_is_asked(tmp_path):
    """A file written before issue 33 has no signature and is not encrypted: dl.load reads it
    as before (the stored checkpoints of tests/data are loaded by test_saved_checkpoints.py)."""
    path = dl.save(dl.MLP([3, 2], seed=0), tmp_path / "old.npz")
    assert dl.load(path).sizes == [3, 2]
    path.write_bytes(b"DLCOURSE-ENCRYPTED\n{not json")      # a damaged encrypted file
    with pytest.raises(ProtectionError, match="damaged"):
        dl.load(path, key=b"k" * 32)


# ---- issue 40: key files whole or not at all, the signature read within bounds, messages --------
@pytest.mark.parametrize("already", ["model_signing.pub", "model_signing.key"])
def test_keygen_writes_a_key_pair_whole_or_not_at_all(tmp_path, already):
    folder = tmp_path / "k"
    folder.mkdir()
    (folder / already).write_bytes(b"someone's key")
    with pytest.raises(ProtectionError, match=rf"{already} exists.*together or not at all"):
        protect.keygen(folder)
    assert sorted(p.name for p in folder.iterdir()) == [already]       # nothing written
    assert (folder / already).read_bytes() == b"someone's key"
    (folder / already).unlink()
    private, public = protect.keygen(folder)                          # and it is not stuck
    assert private.exists() and public.exists()


def test_the_command_line_keygen_leaves_no_half_pair(tmp_path):
    folder = tmp_path / "k"
    folder.mkdir()
    (folder / "model_signing.pub").write_bytes(b"old public key")
    r = dlcourse("keygen", folder)
    assert r.returncode == 1 and "Nothing was written" in r.stderr, r.stderr
    assert not (folder / "model_signing.key").exists()


def _signed(model, keys, tmp_path):
    private, public, _ = keys
    return dl.save(model, tmp_path / "m.npz", sign_with=private), public


def test_a_huge_signature_file_is_refused_without_reading_it_whole(model, keys, tmp_path):
    import tracemalloc
    path, public = _signed(model, keys, tmp_path)
    sig = protect.signature_path(path)
    with open(sig, "r+b") as f:
        f.truncate(64 * 2**20)                     # 64 MiB (sparse: no disk used)
    tracemalloc.start()
    try:
        with pytest.raises(ProtectionError, match=r"more than 4096 bytes.*not one"):
            dl.load(path, public_key=public)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, f"verifying a 64 MiB .sig allocated {peak / 2**20:.0f} MiB"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs and /dev/zero are POSIX's")
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_a_signature_that_is_not_a_regular_file_is_refused_without_reading(model, keys, tmp_path,
                                                                           kind):
    import threading
    path, public = _signed(model, keys, tmp_path)
    sig = protect.signature_path(path)
    sig.unlink()
    if kind == "fifo":
        os.mkfifo(sig)
    else:
        sig.symlink_to("/dev/zero")
    outcome = []

    def verify():
        try:
            dl.load(path, public_key=public)
        except ProtectionError as err:
            outcome.append(str(err))
    reader = threading.Thread(target=verify, daemon=True)
    reader.start()
    reader.join(timeout=20)
    assert not reader.is_alive(), "the signature check waited on a FIFO (or read /dev/zero)"
    assert outcome and "not a regular file" in outcome[0], outcome


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs and /dev/zero are POSIX's")
@pytest.mark.parametrize("which", ["key", "sign_with", "public_key"])
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "huge"])
def test_a_key_that_is_not_a_small_regular_file_is_refused_without_reading(model, keys, tmp_path,
                                                                          which, kind):
    """`--key /dev/zero` once hung reading forever; a FIFO waited for a writer. Every key file
    (the AES key, the private and the public key) is read only when it is a regular file of at
    most MAX_KEY_BYTES."""
    import threading
    private, public, aes = keys
    path = dl.save(model, tmp_path / "m.npz", sign_with=private, encrypt_with=aes)
    bad = tmp_path / "bad.key"
    if kind == "fifo":
        os.mkfifo(bad, 0o600)
    elif kind == "/dev/zero":
        bad.symlink_to("/dev/zero")
    else:
        with open(bad, "wb") as f:
            f.truncate(64 * 2**20)                 # 64 MiB (sparse: no disk used)
        os.chmod(bad, 0o600)
    outcome = []

    def use():
        try:
            if which == "sign_with":
                dl.save(model, tmp_path / "n.npz", sign_with=bad)
            else:
                dl.load(path, **{"key": aes, "public_key": public, which: bad})
        except ProtectionError as err:
            outcome.append(str(err))
    user = threading.Thread(target=use, daemon=True)
    user.start()
    user.join(timeout=20)
    assert not user.is_alive(), f"reading the {which} waited on a {kind}"
    words = "more than 4096 bytes" if kind == "huge" else "not a regular file"
    assert outcome and words in outcome[0] and "dlcourse keygen" in outcome[0], outcome


def test_a_nonce_of_the_wrong_type_says_the_file_is_damaged(model, keys, tmp_path):
    _, _, aes = keys
    path = dl.save(model, tmp_path / "m.npz", encrypt_with=aes)
    data = path.read_bytes()
    end = data.index(b"\n", len(protect.MAGIC))
    header = json.loads(data[len(protect.MAGIC):end])
    for nonce in (5, None, "zz", ["00"]):
        header["nonce"] = nonce
        path.write_bytes(protect.MAGIC + json.dumps(header).encode() + data[end:])
        with pytest.raises(ProtectionError, match=rf"damaged: its encryption header's nonce is "
                                                  rf".*\({type(nonce).__name__}\)"):
            dl.load(path, key=aes)


@pytest.mark.parametrize("value, words", [("ab" * 16, r"got 32 character\(s\)"),
                                          ("g" * 64, "not all hexadecimal digits")])
def test_a_key_in_the_environment_must_be_64_hex_digits(model, keys, tmp_path, monkeypatch,
                                                        value, words):
    _, _, aes = keys
    path = dl.save(model, tmp_path / "m.npz", encrypt_with=aes)
    monkeypatch.setenv(protect.ENV_KEY, value)
    with pytest.raises(ProtectionError, match=rf"\$DLCOURSE_MODEL_KEY must be 64 hexadecimal "
                                              rf"digits.*{words}") as err:
        dl.load(path)
    assert value not in str(err.value)                     # the key itself is never shown


def test_a_signing_key_given_as_the_aes_key_is_named(model, keys, tmp_path):
    private, public, aes = keys
    path = dl.save(model, tmp_path / "m.npz", encrypt_with=aes)
    with pytest.raises(ProtectionError, match="an Ed25519 public key .*not an AES key") as err:
        dl.load(path, key=public)                  # mode 0644: not "chmod 600"
    assert "chmod" not in str(err.value)
    with pytest.raises(ProtectionError, match="an Ed25519 private key .*not an AES key"):
        dl.load(path, key=private)
    with pytest.raises(ProtectionError, match="public key, which only checks signatures"):
        dl.save(model, tmp_path / "n.npz", sign_with=public)


def test_sign_closes_the_model_file(model, keys, tmp_path):
    import gc
    import warnings
    from dlcourse import cli
    path = dl.save(model, tmp_path / "m.npz")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cli.main(["sign", str(path), "--key", str(keys[0])]) == 0
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


# ---- the load_signed exercise's check (lesson 12b)
def _signed_loader(reread: str):
    """A learner's load_signed: read, verify; then ``reread`` = "compare" reads the file again
    and refuses when the bytes changed (safe), "load" verifies and loads from the path again
    (the race the check's attacker wins)."""
    import base64
    from pathlib import Path

    from cryptography.hazmat.primitives import serialization

    def load_signed(path, public_key_file):
        data = Path(path).read_bytes()
        record = json.loads(Path(str(path) + ".sig").read_text())
        key = serialization.load_pem_public_key(Path(public_key_file).read_bytes())
        key.verify(base64.b64decode(record["signature"]), data)
        if reread == "load":
            return dl.checkpoint.load_bytes(path, Path(path).read_bytes())
        if Path(path).read_bytes() != data:
            raise ValueError(f"{path} changed while it was being loaded: refused")
        return dl.checkpoint.load_bytes(path, data)
    return load_signed


def test_load_signed_accepts_read_verify_reread_compare_refuse(capsys):
    """Secure (issue 37: it was refused as "raised for a correctly signed file"): when the file is
    swapped after the first read, refusing it loads nothing forged."""
    dl.check.load_signed(_signed_loader("compare"))
    assert "all 5 cases pass" in capsys.readouterr().out


def test_load_signed_refuses_verify_then_reopen():
    with pytest.raises(dl.check.ExerciseError, match="it loaded the forged model"):
        dl.check.load_signed(_signed_loader("load"))


# ---- the two_time_pad exercise's check (lesson 12b): cribs of either message, one nonce
def _pad(use=(1, 2), stream_of=None, unknown=None, contradictions=True, trim=False,
         as_bytes=False):
    """A learner's two_time_pad, right by default; each argument puts one mistake in: cribs of
    only some messages used, the stream byte taken another way, unknown bytes as something
    else than None, contradictions let through, p1 cut to c2's length, bytes returned."""
    def two_time_pad(c1, c2, cribs):
        stream = {}
        for m, offset, fragment in cribs:
            if m not in use:
                continue
            c = c1 if m == 1 else c2
            for k, byte in enumerate(fragment):
                i = offset + k
                s = stream_of(c1, c2, m, i, byte) if stream_of else c[i] ^ byte
                if contradictions and stream.get(i, s) != s:
                    raise ValueError(f"cribs contradict at {i}")
                stream[i] = s
        p1, p2 = ([c[i] ^ stream[i] if i in stream else unknown for i in range(len(c))]
                  for c in (c1, c2))
        p1 = p1[:len(c2)] if trim else p1
        if as_bytes:
            return bytes(b or 0 for b in p1), bytes(b or 0 for b in p2)
        return p1, p2
    return two_time_pad


def _pad_plain_compare(c1, c2, cribs):
    """Compares the cribs' PLAINTEXT bytes at a shared position (wrong: they may differ)."""
    seen = {}
    for _, offset, fragment in cribs:
        for k, byte in enumerate(fragment):
            if seen.setdefault(offset + k, byte) != byte:
                raise ValueError(offset + k)
    return _pad()(c1, c2, cribs)


def _pad_two_passes(c1, c2, cribs):
    """Right, written differently: a NumPy array of the stream with -1 for unknown, and tuples."""
    n = max(len(c1), len(c2))
    stream = np.full(n, -1)
    for m, offset, fragment in cribs:
        c = np.frombuffer(c1 if m == 1 else c2, np.uint8)[offset:offset + len(fragment)]
        s = c ^ np.frombuffer(fragment, np.uint8)
        old = stream[offset:offset + len(fragment)]
        bad = (old >= 0) & (old != s)
        if bad.any():
            raise ValueError(f"position {offset + int(np.argmax(bad))}: two cribs disagree")
        stream[offset:offset + len(fragment)] = s
    return tuple(tuple(int(b) ^ int(stream[i]) if stream[i] >= 0 else None
                       for i, b in enumerate(c)) for c in (c1, c2))


def test_two_time_pad_passes_the_right_answer_and_one_written_differently(capsys):
    dl.check.two_time_pad(_pad())
    dl.check.two_time_pad(_pad_two_passes)
    assert capsys.readouterr().out.count("all 5 cases pass") == 2


@pytest.mark.parametrize("wrong, words", [
    (_pad(use=(1,)), ["crib of the OTHER message", "Cribs of either message reveal both"]),
    (_pad(stream_of=lambda c1, c2, m, i, byte: byte), ["that is the stream byte"]),
    (_pad(stream_of=lambda c1, c2, m, i, byte: ((c2 if m == 1 else c1) + bytes(64))[i] ^ byte),
     ["OTHER message's byte", "ITS OWN ciphertext"]),
    (_pad(unknown=0), ["expected None", "0 is a byte value"]),
    (_pad(contradictions=False), ["cribs that contradict", "raise ValueError"]),
    (_pad_plain_compare, ["agree wherever they overlap", "not the plaintext bytes"]),
    (_pad(trim=True), ["p1 has 33 items; c1 has 41 bytes"]),
    (_pad(as_bytes=True), ["p1 is bytes", "None where it is unknown"]),
], ids=["one_message_only", "crib_as_stream", "other_ciphertext", "zero_for_unknown",
        "no_contradiction", "plaintext_compare", "trimmed", "bytes"])
def test_two_time_pad_names_the_mistake(wrong, words):
    with pytest.raises(dl.check.ExerciseError) as info:
        dl.check.two_time_pad(wrong)
    for word in words:
        assert word in str(info.value), str(info.value)
