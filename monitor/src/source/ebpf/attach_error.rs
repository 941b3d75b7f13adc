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
    #[error("loading {name}: {source}")]
    Load {
        name: &'static str,
        source: ProgramError,
    },
    #[error("attaching {name} to {target}: {source}")]
    Attach {
        name: &'static str,
        target: &'static str,
        source: ProgramError,
    },
    /// fentry programs are loaded for one kernel function, which names them in the reason.
    #[error("loading fentry on {function}: {source}")]
    LoadFentry {
        function: &'static str,
        source: ProgramError,
    },
    #[error("attaching fentry to {function}: {source}")]
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
