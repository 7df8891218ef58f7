"""Secure aggregation of dense sums: the coordinator learns ``Σ_p v_p`` and nothing else about the
sites' vectors ``v_p`` (honest-but-curious coordinator, no dropout recovery).

Each site ``i`` holds an X25519 key pair made for this run; the coordinator forwards every site's
public key (in the run plan). For every other site ``j`` it derives the pair secret
``k_ij = HKDF-SHA256(X25519(sk_i, pk_j), salt = run id, info = "bnsl secure-sum v1")`` (both ends
get the same value), and per summed message a mask stream
``m_ij = AES-256-CTR(HKDF(k_ij, info = tag), 0)`` of ``len(v)`` 64-bit words (``tag`` names the
message, e.g. its kind and round, and is never reused within a run). Site ``i`` sends

    y_i = q(v_i) + Σ_{j > i} m_ij − Σ_{j < i} m_ji     (mod 2^64)

where ``q(v) = round(v · 2^f)`` is the fixed-point encoding in two's complement. The masks cancel in
``Σ_i y_i = Σ_i q(v_i) (mod 2^64)``; read as a signed 64-bit integer and divided by ``2^f`` it is the
sum, exact up to the rounding of each term (``|error| ≤ P · 2^-(f+1)`` per entry). Each ``y_i``
alone is uniformly distributed given the others' keys are unknown, so the coordinator learns only
the sum.

Fixed point (``f = scale_bits``, default 32): resolution ``2^-32 ≈ 2.3e-10``; every site checks
``|v| < 2^(63-f) / P`` for its own entries (so no partial sum of ``P`` terms can wrap), i.e.
``|v| < 2^31 / P ≈ 2.7e8`` for P = 8 at the default scale, and refuses with
:class:`SecureSumRangeError` otherwise (never a silent wrap). Non-finite values are refused too.

This is cryptography, not differential privacy: it hides the individual terms from the coordinator,
it adds no noise and it never touches the privacy ledger. If a site drops out, the remaining masks
do not cancel: the run aborts (no recovery).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from bnsl_cli.errors import SecureSumRangeError

__all__ = [
    "SCALE_BITS", "ALL_SITES", "SUMMABLE_KINDS", "summable_span", "describe", "SecureSumRangeError",
    "generate_keypair", "SecureSum", "encode_fixed", "decode_sum", "unmask_sum",
]

SCALE_BITS = 32
_INFO = b"bnsl secure-sum v1"

#: The sender field of a reply that is the sum over all sites (what the networked fleet hands the
#: coordinator under secure aggregation instead of any one site's reply).
ALL_SITES = 0xFFFFFFFF

#: Protocol message kinds whose values the coordinator only ever sums over the participants:
#: fed-bnsl's dense update ``B_p`` (3, with its objective when present), the polish's second
#: moments (5), the shares of the column statistics and of fed-moments' pooled moments (25).
SUMMABLE_KINDS = {3, 5, 25}
_HEADER_SIZE = 18
_WHAT = {
    3: "its local matrix B_p",
    5: "its share of the polish's second moments",
    25: "its share of the pooled statistics",
}


def summable_span(reply: bytes):
    """``(start, count)``: the float64 values of a summable protocol message (``reply[start:]``,
    ``count`` of them; the bytes before ``start`` travel in the clear and must be equal across the
    sites up to the sender), or ``None`` when the message is not summable."""
    if reply is None or len(reply) < _HEADER_SIZE or reply[0] not in SUMMABLE_KINDS:
        return None
    start = _HEADER_SIZE + (1 if reply[0] == 3 else 0)  # the dense update's objective flag stays clear
    if len(reply) < start or (len(reply) - start) % 8:
        return None
    return start, (len(reply) - start) // 8


def describe(kind: int) -> str:
    """What a summable message of ``kind`` carries, for error messages."""
    return _WHAT.get(int(kind), f"a kind-{kind} message")


def generate_keypair() -> tuple[object, bytes]:
    """A fresh X25519 private key and its raw 32-byte public key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    sk = X25519PrivateKey.generate()
    pk = sk.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return sk, pk


def _hkdf(secret: bytes, salt: bytes, info: bytes) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=info).derive(secret)


def _stream(key: bytes, words: int) -> np.ndarray:
    """``words`` pseudo-random uint64 from AES-256-CTR under ``key`` (counter block 0)."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    enc = Cipher(algorithms.AES(key), modes.CTR(b"\x00" * 16)).encryptor()
    raw = enc.update(b"\x00" * (8 * words)) + enc.finalize()
    return np.frombuffer(raw, dtype="<u8").copy()


def encode_fixed(values: np.ndarray, scale_bits: int, n_parties: int) -> np.ndarray:
    """``round(v · 2^f)`` as uint64 (two's complement), after the range check."""
    v = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(v)):
        raise SecureSumRangeError("secure sum: a value to be summed is not finite")
    limit = 2.0 ** (63 - scale_bits) / max(int(n_parties), 1)
    if v.size and float(np.max(np.abs(v))) >= limit:
        raise SecureSumRangeError(
            f"secure sum: a value of magnitude {float(np.max(np.abs(v))):.3g} exceeds the fixed-point range "
            f"|v| < 2^{63 - scale_bits}/{n_parties} = {limit:.3g}"
        )
    q = np.rint(np.ldexp(v, scale_bits)).astype(np.int64)
    return q.view(np.uint64)


def decode_sum(total: np.ndarray, scale_bits: int) -> np.ndarray:
    """The float sum from the mod-2^64 sum of fixed-point terms."""
    return np.ldexp(np.asarray(total, dtype=np.uint64).view(np.int64).astype(np.float64), -scale_bits)


def unmask_sum(masked: Sequence[np.ndarray], scale_bits: int = SCALE_BITS) -> np.ndarray:
    """``Σ_i y_i mod 2^64`` decoded: the sum of the sites' values (the masks cancel)."""
    total = np.zeros(np.asarray(masked[0]).size, dtype=np.uint64)
    for y in masked:
        y = np.asarray(y, dtype=np.uint64)
        if y.size != total.size:
            raise ValueError("secure sum: masked vectors of different lengths")
        total += y  # uint64 arithmetic wraps modulo 2^64
    return decode_sum(total, scale_bits)


class SecureSum:
    """Site ``index``'s masking for a run: its X25519 private key, every site's public key (in site
    order) and the run id (the HKDF salt, fresh per run)."""

    def __init__(self, index: int, private_key, public_keys: Sequence[bytes], run_id: bytes,
                 scale_bits: int = SCALE_BITS):
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey

        self.index = int(index)
        self.n = len(public_keys)
        if not 0 <= self.index < self.n:
            raise ValueError("secure sum: site index outside the key list")
        if not 8 <= int(scale_bits) <= 48:
            raise ValueError("secure sum: scale_bits must be between 8 and 48")
        self.scale_bits = int(scale_bits)
        self._used: set[bytes] = set()
        self._pair: dict[int, bytes] = {}
        for j, pk in enumerate(public_keys):
            if j == self.index:
                continue
            if len(pk) != 32:
                raise ValueError(f"secure sum: public key of site {j + 1} is not 32 bytes")
            shared = private_key.exchange(X25519PublicKey.from_public_bytes(bytes(pk)))
            if shared == b"\x00" * 32:
                raise ValueError(f"secure sum: public key of site {j + 1} is degenerate")
            self._pair[j] = _hkdf(shared, bytes(run_id), _INFO)

    def mask(self, values: np.ndarray, tag: bytes) -> np.ndarray:
        """This site's masked fixed-point vector ``y_i`` for the message named ``tag``."""
        tag = bytes(tag)
        if tag in self._used:
            raise ValueError(f"secure sum: tag {tag!r} used twice in one run (a mask must never be reused)")
        self._used.add(tag)
        y = encode_fixed(values, self.scale_bits, self.n)
        words = y.size
        for j, k in self._pair.items():
            m = _stream(_hkdf(k, b"", _INFO + b"|" + tag), words)
            if self.index < j:
                y += m
            else:
                y -= m
        return y
