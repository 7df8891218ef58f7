"""Messages between participants and the coordinator, with their byte encoding.

Every message is a small frozen dataclass with ``encode() -> bytes`` and ``decode(bytes)``. The
encoded length is what the run report counts as communication, and the encoding is what a network
transport would send. Layout (little endian): a fixed header ``kind:u8, version:u8, round:u32,
sender:u32, d:u32, count:u32`` (18 bytes), then a message-specific payload. Indices are int32,
values float64. A matrix entry ``(i, j)`` is addressed by its flat row-major index ``i·d + j``
(one int32). Matrices travel in one of three formats, whichever is smallest:

- 0, sparse: ``(index:int32, value:float64)`` pairs, 12 bytes per non-zero;
- 1, dense: row-major float64, 8·d² bytes;
- 2, support delta (broadcasts only): both ends remember the support of the previous broadcast;
  the message lists the indices that joined and left it (int32 each) and then the values on the
  new support in index order (8 bytes each). Between ADMM rounds the support of W barely moves,
  so this halves the downlink against pairs without losing a bit.

Orientation: a matrix entry ``(i, j)`` is the edge ``i → j``.
"""

from bnsl_cli.federated.messages.admm import (  # noqa: F401
    ConsensusBroadcast,
    DenseUpdate,
    GramReply,
    GramRequest,
    SparseUpdate,
)
from bnsl_cli.federated.messages.shares import (  # noqa: F401
    CentreBroadcast,
    MomentRequest,
    ShareReply,
    StandardizeBroadcast,
    StatsRequest,
)
from bnsl_cli.federated.messages.validation import (  # noqa: F401
    REPLY_VALUE_LIMIT,
    validate_reply,
)
from bnsl_cli.federated.messages.wire import (  # noqa: F401
    HEADER,
    SUMMABLE_KINDS,
    Header,
    MessageKind,
    SparseEntries,
    SupportState,
    decode_matrix,
    encode_matrix,
    is_stop,
    message_kind,
    read_header,
    same_but_sender,
    summable_span,
    with_sender,
)

__all__ = [
    "HEADER",
    "MessageKind",
    "Header",
    "read_header",
    "is_stop",
    "SUMMABLE_KINDS",
    "summable_span",
    "REPLY_VALUE_LIMIT",
    "validate_reply",
    "with_sender",
    "same_but_sender",
    "SparseEntries",
    "SupportState",
    "ConsensusBroadcast",
    "SparseUpdate",
    "DenseUpdate",
    "GramRequest",
    "GramReply",
    "message_kind",
    "encode_matrix",
    "decode_matrix",
    "StatsRequest",
    "StandardizeBroadcast",
    "MomentRequest",
    "ShareReply",
    "CentreBroadcast",
]
