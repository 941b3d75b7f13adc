//! Whether BTF gives a tracepoint the arguments a raw tracepoint program reads: raw programs
//! get the tracepoint's `TP_PROTO` as is, so a kernel that changed it would feed them garbage.
use super::btf::{BtfError, Types};

/// Why a raw tracepoint program cannot read a tracepoint's arguments here.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum PrototypeError {
    /// No `btf_trace_<name>` typedef: the kernel lacks the tracepoint, or BTF for it.
    #[error("the kernel's BTF has no tracepoint {0}")]
    Absent(&'static str),
    /// The tracepoint's arguments changed; `reader` says who reads `expected`.
    #[error("tracepoint {tracepoint} has arguments ({found}), {reader} ({expected})")]
    Other {
        tracepoint: &'static str,
        found: String,
        reader: &'static str,
        expected: String,
    },
    #[error(transparent)]
    Btf(#[from] BtfError),
}

/// `Ok` when BTF gives `tracepoint` exactly the arguments `expected`, read by `reader`
/// ("the raw programs read", "the program reads").
pub(crate) fn check(
    types: &Types<'_>,
    tracepoint: &'static str,
    expected: &[&str],
    reader: &'static str,
) -> Result<(), PrototypeError> {
    match types.tracepoint_params(tracepoint)? {
        Some(params) if params == expected => Ok(()),
        Some(params) => Err(PrototypeError::Other {
            tracepoint,
            found: params.join(", "),
            reader,
            expected: expected.join(", "),
        }),
        None => Err(PrototypeError::Absent(tracepoint)),
    }
}
