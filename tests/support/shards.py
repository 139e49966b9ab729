"""Damaging a shard's tokens on disk, as a bad copy or a bit flip would (for the tests that must catch it)."""

from roxxel.format import open_shard


def overwrite_token(path, token: int, data: bytes = b"\xff\xff") -> None:
    """Write ``data`` over the bytes of token ``token`` (and on, if longer) of the shard at ``path``, in place."""
    shard = open_shard(str(path))
    with open(path, "r+b") as f:
        f.seek(shard.data_offset + token * shard.dtype.itemsize)
        f.write(data)


def flip_byte(path, token: int) -> None:
    """Invert the high byte of token ``token`` of the shard at ``path`` (a uint16 id < 256 becomes >= 65,280)."""
    shard = open_shard(str(path))
    offset = shard.data_offset + token * shard.dtype.itemsize + 1
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))
