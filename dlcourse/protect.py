"""Protecting a model: who made it (a signature) and who may read it (encryption).

Introduced in notebook ``12_checkpoint_to_service``. A checkpoint's SHA-256 (``checkpoint.py``)
catches accidents: a flipped bit, a truncated copy. It cannot catch a forgery, because whoever
can change the weights can write a new digest beside them. Two more tools, from the maintained
``cryptography`` package (never hand-rolled), each against one threat:

* **Forgery → a signature.** ``dlcourse keygen DIR`` writes an Ed25519 key pair; the private key
  signs, anyone with the public key verifies. ``dl.save(model, path, sign_with=PRIVATE)`` writes
  the signature **beside** the file, as ``path + ".sig"``, over the file's exact bytes: it covers
  everything (the digest, the architecture, the arrays; an encrypted file's ciphertext), needs no
  rule for which bytes count, and leaves the checkpoint format unchanged, so older readers and
  zip tools still read a signed file. ``dl.load(path, public_key=PUBLIC)`` reads the file's
  bytes once, verifies the signature on them and loads those same bytes (no check-then-reopen
  race), refusing a missing signature, one made by another key, or one that does not match.
* **Disclosure → encryption.** ``dl.save(model, path, encrypt_with=KEYFILE)`` writes the
  checkpoint encrypted with AES-256-GCM under a 32-byte key (``dlcourse keygen DIR --aes``): a
  fresh random 96-bit nonce each save; a readable header line (format, version, cipher, key id,
  nonce) that the cipher authenticates, so a wrong key is reported as a wrong key (the key id
  differs) and a damaged file as damaged (the tag does not verify). ``dl.load(path, key=KEYFILE)``.

Both at once: the file is encrypted first and the signature covers the encrypted bytes
(encrypt-then-sign), so a forged or damaged file is refused before anything is decrypted, and the
signature can be checked by someone who holds no decryption key.

Keys: a file (raw 32 bytes for AES, as keygen writes it, or 64 hexadecimal digits; PEM for the
Ed25519 keys) that only its owner can read (a key readable by group or others is refused: run
``chmod 600``), or, for the AES key, the environment variable ``DLCOURSE_MODEL_KEY`` (64
hexadecimal digits). Never a command-line argument: other users see those in process lists.
A key of the other kind (the public key given as the AES key) is named as such. ``keygen``
checks every file it would write before writing any, so a pair is written whole or not at all.
A ``.sig`` or a key file is read only when it is a regular file, and at most
:data:`MAX_SIGNATURE_BYTES` or :data:`MAX_KEY_BYTES` of it (``--key /dev/zero`` is refused at once).
The optional extra ``protect`` installs ``cryptography``: ``pip install -e ".[protect]"``.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import stat
from pathlib import Path

from ._io import atomic_write

__all__ = ["ProtectionError", "keygen", "read_aes_key", "encrypt", "decrypt", "is_encrypted",
           "sign_bytes", "verify_bytes", "read_signature_file", "signature_path", "public_key_id",
           "ENV_KEY"]

ENV_KEY = "DLCOURSE_MODEL_KEY"
MAGIC = b"DLCOURSE-ENCRYPTED\n"          # the first line of an encrypted checkpoint
FORMAT, VERSION, CIPHER = "dlcourse-encrypted", 1, "AES-256-GCM"
SIGNATURE_FORMAT = "dlcourse-signature"
MAX_SIGNATURE_BYTES = 4096            # a .sig is ~230 bytes; anything larger is not one
MAX_KEY_BYTES = 4096                  # a key file is 32 bytes (AES) or ~120 (PEM); likewise
PRIVATE_NAME, PUBLIC_NAME, AES_NAME = "model_signing.key", "model_signing.pub", "model.aeskey"


class ProtectionError(ValueError):
    """A signature or an encryption check failed, or a key is unusable: the message says which
    and what to do."""


def _crypto():
    try:
        import cryptography  # noqa: F401
    except ImportError:
        raise ImportError("signing and encrypting models needs the cryptography package: "
                          "python -m pip install -e \".[protect]\"") from None
    from cryptography.exceptions import InvalidSignature, InvalidTag
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    return InvalidSignature, InvalidTag, serialization, ed25519, AESGCM


def key_id(raw: bytes) -> str:
    """A short name of a key (16 hex digits of a SHA-256 over it): tells keys apart, reveals
    nothing usable about a 256-bit key."""
    return hashlib.sha256(b"dlcourse key id\0" + raw).hexdigest()[:16]


# --------------------------------------------------------------------------------------
# keys
# --------------------------------------------------------------------------------------
def _write_new(path: Path, data: bytes, mode: int) -> None:
    """Create ``path`` with ``mode`` and write ``data``; never overwrite (a key lost is a
    model no one can open or trust)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), mode)
    except FileExistsError:
        raise ProtectionError(f"{path} exists: keygen never overwrites a key (models signed or "
                              f"encrypted with it would be lost). Move it away first, or "
                              f"choose another folder.") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(path, mode)           # whatever the umask said
    except BaseException:
        os.unlink(path)                # never half a key
        raise


def keygen(folder, aes: bool = False) -> list[Path]:
    """Write a new Ed25519 key pair into ``folder`` (``model_signing.key``, mode 0600, and
    ``model_signing.pub``), or with ``aes=True`` a 32-byte AES key (``model.aeskey``, 0600).
    Refuses to overwrite. All or nothing: every target is checked before anything is written,
    and a failure while writing removes what this call wrote. Returns the files written."""
    _, _, serialization, ed25519, _ = _crypto()
    folder = Path(folder).expanduser()
    names = [AES_NAME] if aes else [PRIVATE_NAME, PUBLIC_NAME]
    there = [folder / name for name in names if os.path.lexists(folder / name)]
    if there:
        raise ProtectionError(f"{' and '.join(map(str, there))} "
                              f"{'exists' if len(there) == 1 else 'exist'}: keygen never "
                              f"overwrites a key (models signed or encrypted with it would be "
                              f"lost), and writes {' and '.join(names)} together or not at "
                              f"all. Move {'it' if len(there) == 1 else 'them'} away first, or "
                              f"choose another folder. Nothing was written.")
    if folder.exists() and not folder.is_dir():
        raise ProtectionError(f"{folder} is a file, not a folder: give keygen a folder to write "
                              f"{' and '.join(names)} into. Nothing was written.")
    if aes:
        files = [(folder / AES_NAME, os.urandom(32), 0o600)]
    else:
        private = ed25519.Ed25519PrivateKey.generate()
        pem = private.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        pub = private.public_key().public_bytes(serialization.Encoding.PEM,
                                                serialization.PublicFormat.SubjectPublicKeyInfo)
        files = [(folder / PRIVATE_NAME, pem, 0o600), (folder / PUBLIC_NAME, pub, 0o644)]
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    try:
        for path, data, mode in files:
            _write_new(path, data, mode)
            written.append(path)
    except BaseException:              # a key pair is written whole or not at all
        for path in written:
            path.unlink(missing_ok=True)
        raise
    return written


def _looks_like_a_key(text: str) -> bool:
    return bool(re.fullmatch(r"[0-9a-fA-F]{64}|[A-Za-z0-9+/]{43}=", text.strip()))


def _secret_file(path, what: str) -> bytes:
    """The bytes of a secret key file, refused when others can read it."""
    if isinstance(path, str) and not Path(path).expanduser().exists() and _looks_like_a_key(path):
        raise ProtectionError(f"the {what} given looks like the key itself, not a file: a key given "
                              f"as an argument shows in process lists and shell history. Put it in a "
                              f"file only you can read (chmod 600) and give its path, or set "
                              f"{ENV_KEY}.")
    path = Path(path).expanduser()
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"No {what} at {path}: give the file `dlcourse keygen` wrote.") \
            from None
    data = _read_small(path, MAX_KEY_BYTES, what, "the file `dlcourse keygen` wrote")
    _refuse_other_kind(data, path, what)
    if os.name == "posix" and stat.S_IMODE(info.st_mode) & 0o077:
        raise ProtectionError(f"{path} is readable by others (mode "
                              f"{stat.S_IMODE(info.st_mode):04o}): a {what} must be private. "
                              f"Run: chmod 600 {path}")
    return data


def _refuse_other_kind(data: bytes, path, what: str) -> None:
    """Refuse a key file of another kind than ``what`` ("key": the AES key, or "private
    key"): an Ed25519 key given where the AES key goes, or the public key for the private."""
    head = data[:64]
    public, private = b"-----BEGIN PUBLIC KEY-----" in head, b"PRIVATE KEY-----" in head
    if what == "key" and public:
        raise ProtectionError(f"{path} is an Ed25519 public key (the {PUBLIC_NAME} that checks "
                              f"signatures), not an AES key: a checkpoint is decrypted with the "
                              f"AES key `dlcourse keygen DIR --aes` wrote ({AES_NAME}). Give "
                              f"that as --key (key=...); the public key goes to --public-key "
                              f"(public_key=...).")
    if what == "key" and private:
        raise ProtectionError(f"{path} is an Ed25519 private key (the {PRIVATE_NAME} that "
                              f"signs), not an AES key: a checkpoint is decrypted with the AES "
                              f"key `dlcourse keygen DIR --aes` wrote ({AES_NAME}). Give that as "
                              f"--key (key=...); the private key signs (dlcourse sign --key, "
                              f"sign_with=...).")
    if what == "private key" and public:
        raise ProtectionError(f"{path} is an Ed25519 public key, which only checks signatures: "
                              f"signing needs the private key `dlcourse keygen` wrote beside it "
                              f"({PRIVATE_NAME}).")


def _aes_from_text(data: bytes, where: str) -> bytes:
    if len(data) == 32:
        return data                                     # raw, as keygen --aes writes it
    text = data.strip()
    if len(text) == 64 and re.fullmatch(rb"[0-9a-fA-F]{64}", text):
        return bytes.fromhex(text.decode())
    raise ProtectionError(f"{where} is not an AES-256 key: expected 32 raw bytes (as `dlcourse "
                          f"keygen DIR --aes` writes) or 64 hexadecimal digits, got "
                          f"{len(data)} bytes.")


def read_aes_key(key=None) -> bytes:
    """The 32-byte AES key: ``key`` is a file path, the key's 32 bytes themselves (Python only),
    or None for ``$DLCOURSE_MODEL_KEY`` (64 hex digits)."""
    if isinstance(key, (bytes, bytearray)):
        return _aes_from_text(bytes(key), "the key given")
    if key is None:
        text = os.environ.get(ENV_KEY)
        if not text:
            raise ProtectionError(f"this checkpoint is encrypted: give its key (dl.load(path, "
                                  f"key='model.aeskey'), --key FILE) or set {ENV_KEY}.")
        if not re.fullmatch(r"[0-9a-fA-F]{64}", text.strip()):   # (never raw bytes: it is text)
            n = len(text.strip())
            raise ProtectionError(f"${ENV_KEY} must be 64 hexadecimal digits (the 32-byte AES "
                                  f"key written in hex), got {n} character(s)"
                                  f"{'' if n != 64 else ' that are not all hexadecimal digits'}. "
                                  f"Set it from the key file: export {ENV_KEY}=$(python -c "
                                  f"\"print(open('keys/{AES_NAME}', 'rb').read().hex())\").")
        return bytes.fromhex(text.strip())
    return _aes_from_text(_secret_file(key, "key"), str(key))


def _private_key(path):
    _, _, serialization, ed25519, _ = _crypto()
    data = _secret_file(path, "private key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as err:
        raise ProtectionError(f"{path} is not a private key in PEM form ({err}); give the "
                              f"{PRIVATE_NAME} that `dlcourse keygen` wrote.") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise ProtectionError(f"{path} is not an Ed25519 private key; `dlcourse keygen` "
                              f"writes one.")
    return key


def _public_key(path):
    _, _, serialization, ed25519, _ = _crypto()
    if isinstance(path, str) and _looks_like_a_key(path) and not Path(path).exists():
        raise ProtectionError("give the public key as a file (the .pub that `dlcourse keygen` "
                              "wrote), not its text.")
    try:
        data = _read_small(Path(path).expanduser(), MAX_KEY_BYTES, "public key",
                           f"the {PUBLIC_NAME} that `dlcourse keygen` wrote")
    except FileNotFoundError:
        raise FileNotFoundError(f"No public key at {path}: give the {PUBLIC_NAME} that "
                                f"`dlcourse keygen` wrote.") from None
    try:
        key = (ed25519.Ed25519PublicKey.from_public_bytes(data) if len(data) == 32
               else serialization.load_pem_public_key(data))
    except ValueError as err:
        raise ProtectionError(f"{path} is not a public key ({err}); give the {PUBLIC_NAME} "
                              f"that `dlcourse keygen` wrote.") from None
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise ProtectionError(f"{path} is not an Ed25519 public key.")
    return key


def _raw_public(key) -> bytes:
    _, _, serialization, _, _ = _crypto()
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


# --------------------------------------------------------------------------------------
# encryption: MAGIC, one line of JSON (authenticated, readable), then ciphertext and tag
# --------------------------------------------------------------------------------------
def is_encrypted(data: bytes) -> bool:
    return data.startswith(MAGIC)


def encrypt(plain: bytes, key) -> bytes:
    """``plain`` encrypted with AES-256-GCM under ``key`` (see :func:`read_aes_key`)."""
    *_, AESGCM = _crypto()
    raw = read_aes_key(key)
    nonce = os.urandom(12)
    header = json.dumps({"format": FORMAT, "version": VERSION, "cipher": CIPHER,
                         "key_id": key_id(raw), "nonce": nonce.hex()}, sort_keys=True)
    head = MAGIC + header.encode() + b"\n"
    return head + AESGCM(raw).encrypt(nonce, plain, head)


def decrypt(data: bytes, key, name="the checkpoint") -> bytes:
    """The plaintext of :func:`encrypt`'s output, or ProtectionError saying wrong key or
    damaged."""
    _, InvalidTag, _, _, AESGCM = _crypto()
    end = data.find(b"\n", len(MAGIC))
    try:
        header = json.loads(data[len(MAGIC):end]) if 0 < end <= 4096 else None
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ProtectionError(f"{name} is damaged: its encryption header is unreadable.")
    if header.get("version") != VERSION or header.get("cipher") != CIPHER:
        raise ProtectionError(f"{name} was encrypted as {header.get('cipher')} version "
                              f"{header.get('version')}; this dlcourse reads {CIPHER} version "
                              f"{VERSION}: upgrade dlcourse.")
    nonce = header.get("nonce")
    if not (isinstance(nonce, str) and re.fullmatch(r"[0-9a-fA-F]{24}", nonce)):
        raise ProtectionError(f"{name} is damaged: its encryption header's nonce is {nonce!r:.40} "
                              f"({type(nonce).__name__}), not the 24 hexadecimal digits dlcourse "
                              f"writes. Copy or save it again.")
    raw = read_aes_key(key)
    if header.get("key_id") != key_id(raw):
        raise ProtectionError(f"wrong key for {name}: it was encrypted with the key whose id is "
                              f"{header.get('key_id')}, and the key given has id {key_id(raw)}.")
    head = data[:end + 1]
    try:
        return AESGCM(raw).decrypt(bytes.fromhex(nonce), data[end + 1:], head)
    except (InvalidTag, ValueError, KeyError):
        raise ProtectionError(f"{name} is damaged or was altered: the key is the right one, but "
                              f"the encrypted bytes do not verify (AES-GCM tag). Copy or save "
                              f"it again.") from None


# --------------------------------------------------------------------------------------
# signatures: PATH.sig beside the file, over its exact bytes
# --------------------------------------------------------------------------------------
def signature_path(path) -> Path:
    path = Path(path)
    return path.with_name(path.name + ".sig")


def sign_bytes(data: bytes, private_key) -> bytes:
    """The contents of a ``.sig`` file for ``data``: JSON naming the algorithm, the signing
    key's id and the base64 Ed25519 signature."""
    key = _private_key(private_key)
    return (json.dumps({"format": SIGNATURE_FORMAT, "version": 1, "algorithm": "Ed25519",
                        "key_id": key_id(_raw_public(key.public_key())),
                        "signature": base64.b64encode(key.sign(data)).decode()},
                       sort_keys=True, indent=1) + "\n").encode()


def write_signature(path, data: bytes, private_key) -> Path:
    """Write ``path.sig`` for the bytes ``data`` of ``path`` (atomically)."""
    sig = signature_path(path)
    text = sign_bytes(data, private_key)
    with atomic_write(sig) as f:
        f.write(text)
    return sig


def public_key_id(path) -> str:
    """The key id of the public key file at ``path``: the id a ``.sig`` it verifies names."""
    return key_id(_raw_public(_public_key(path)))


def _read_small(path: Path, limit: int, what: str, wanted: str) -> bytes:
    """The bytes of ``path``, read only when it is a regular file of at most ``limit`` bytes: a
    FIFO, a device such as /dev/zero, a folder or a huge file is refused without reading it
    (``what``: what the file should be; ``wanted``: the file to give instead).
    FileNotFoundError when there is none."""
    # O_NONBLOCK: opening a FIFO must not wait for a writer (it is then refused, unread)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with os.fdopen(fd, "rb") as f:                         # closes fd, whatever happens
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ProtectionError(f"{path} is not a regular file (a FIFO, a device or a folder), "
                                  f"so it is not a {what}: give {wanted}. Refused without "
                                  f"reading it.")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ProtectionError(f"{path} holds more than {limit} bytes, which is more than any "
                              f"{what}: this is not one (another file under that name?). Give "
                              f"{wanted}.")
    return data


def read_signature_file(sig: Path) -> bytes:
    """The bytes of the signature file ``sig``, read only when it is a regular file of at most
    :data:`MAX_SIGNATURE_BYTES` (a FIFO, a device such as /dev/zero, or a huge file is refused
    without reading it). FileNotFoundError when there is none."""
    return _read_small(sig, MAX_SIGNATURE_BYTES, "signature",
                       "the small file `dlcourse sign` writes: remove this one and sign again "
                       "(dlcourse sign)")


def verify_bytes(data: bytes, path, public_key) -> None:
    """Raise ProtectionError unless ``path.sig`` is a valid signature of ``data`` (the bytes
    read from ``path``) by ``public_key``."""
    InvalidSignature, *_ = _crypto()
    key = _public_key(public_key)
    sig = signature_path(path)
    try:
        text = read_signature_file(sig)
    except FileNotFoundError:
        raise ProtectionError(f"{path} is not signed (no {sig.name} beside it), and a public key "
                              f"was given: refusing an unsigned model. Sign it with `dlcourse "
                              f"sign {Path(path).name} --key {PRIVATE_NAME}`.") from None
    try:
        record = json.loads(text)
    except ValueError:
        record = None
    if not (isinstance(record, dict) and record.get("format") == SIGNATURE_FORMAT
            and record.get("algorithm") == "Ed25519" and isinstance(record.get("signature"), str)):
        raise ProtectionError(f"{sig} is not a dlcourse signature file (damaged?).")
    want = key_id(_raw_public(key))
    if record.get("key_id") != want:
        raise ProtectionError(f"{path} was signed by another key (key id {record.get('key_id')}),"
                              f" not by the public key given (key id {want}): refusing it.")
    try:
        key.verify(base64.b64decode(record["signature"], validate=True), data)
    except (InvalidSignature, ValueError):
        raise ProtectionError(f"{path} does not match its signature: the file was changed after "
                              f"it was signed (or the signature was). Refusing it. If you saved "
                              f"or changed it yourself, sign it again: `dlcourse sign "
                              f"{path} --key {PRIVATE_NAME}`.") from None
