//! Why one embedded program could not be put on its hook, or its map filled; shared by every
//! hook kind, with the helpers that name the program or map in the error.
use aya::{
    Ebpf, Pod,
    maps::{Array, MapError},
    programs::{Program, ProgramError},
};

/// Why a program of the embedded object could not be loaded and attached.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AttachError {
    #[error("program {0} is not in the embedded object")]
    NoProgram(&'static str),
    /// The object has the program as another kind than the hook needs.
    #[error("program {name}: {source}")]
    ProgramType {
        name: &'static str,
        source: ProgramError,
    },
    /// The verifier or the kernel refused the program.
    #[error("loading {name}: {}", WithCauses(source))]
    Load {
        name: &'static str,
        source: ProgramError,
    },
    #[error("attaching {name} to {target}: {}", WithCauses(source))]
    Attach {
        name: &'static str,
        target: &'static str,
        source: ProgramError,
    },
    /// fentry programs are loaded for one kernel function, which names them in the reason.
    #[error("loading fentry on {function}: {}", WithCauses(source))]
    LoadFentry {
        function: &'static str,
        source: ProgramError,
    },
    #[error("attaching fentry to {function}: {}", WithCauses(source))]
    AttachFentry {
        function: &'static str,
        source: ProgramError,
    },
    #[error("kernel map {0} missing")]
    NoMap(&'static str),
    #[error("writing {name}: {source}")]
    WriteMap {
        name: &'static str,
        source: MapError,
    },
}

/// An error and its causes, `: `-joined. aya's syscall errors name the call and keep the
/// errno as their cause, and the errno is what tells a refused hook (EOPNOTSUPP, ENOTSUPP)
/// from a busy one (EBUSY) in the one line the agent logs and `doctor` prints.
struct WithCauses<'a>(&'a ProgramError);

impl std::fmt::Display for WithCauses<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = std::error::Error::source(self.0);
        while let Some(error) = cause {
            write!(f, ": {error}")?;
            cause = error.source();
        }
        Ok(())
    }
}

/// The program `name` as the kind `P` its hook needs.
pub(super) fn program<'a, P>(
    ebpf: &'a mut Ebpf,
    name: &'static str,
) -> Result<&'a mut P, AttachError>
where
    &'a mut P: TryFrom<&'a mut Program, Error = ProgramError>,
{
    ebpf.program_mut(name)
        .ok_or(AttachError::NoProgram(name))?
        .try_into()
        .map_err(|source| AttachError::ProgramType { name, source })
}

/// Writes `value` at `index` of the array map `name`.
pub(super) fn write_map<V: Pod>(
    ebpf: &mut Ebpf,
    name: &'static str,
    index: u32,
    value: V,
) -> Result<(), AttachError> {
    Array::<_, V>::try_from(ebpf.map_mut(name).ok_or(AttachError::NoMap(name))?)
        .and_then(|mut array| array.set(index, value, 0))
        .map_err(|source| AttachError::WriteMap { name, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_attach_names_the_call_and_the_errno() {
        let refused = AttachError::AttachFentry {
            function: "__mod_memcg_lruvec_state",
            source: ProgramError::SyscallError(aya::sys::SyscallError {
                call: "bpf_raw_tracepoint_open",
                io_error: std::io::Error::from_raw_os_error(libc::EBUSY),
            }),
        };
        assert_eq!(
            refused.to_string(),
            "attaching fentry to __mod_memcg_lruvec_state: `bpf_raw_tracepoint_open` failed: \
             Device or resource busy (os error 16)"
        );
    }
}
