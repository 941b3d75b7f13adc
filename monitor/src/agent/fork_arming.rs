//! What the kernel's fork counter was last told: the agent arms it again only when that
//! changes.
/// What the kernel's fork counter was last told, so it is armed again only when the pid
/// headroom changed or the counter fired.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum ForkArming {
    /// Not armed since start, or its record came (the kernel disarms it then).
    #[default]
    Unknown,
    /// Disarmed: no pid threshold to wake for, or one is met.
    Disarmed,
    /// Armed to wake after this many tasks are created.
    ArmedAt(u64),
}

impl ForkArming {
    /// Armed at `headroom` tasks, or disarmed without one.
    pub(super) fn at(headroom: Option<u64>) -> Self {
        headroom.map_or(ForkArming::Disarmed, ForkArming::ArmedAt)
    }
}
