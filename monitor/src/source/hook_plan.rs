//! Which hook counts per-cgroup memory: one plan that the loader follows and `monitor doctor`
//! reports, so the two cannot disagree. Pure: it takes what the kernel offers as plain facts.
use super::hook_unavailable::HookUnavailable;

/// Which hook the per-cgroup memory programs use (see [`super::programs`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum MemcgHook {
    /// Raw tracepoints on the `memcg` tracepoints (6.13+): their arguments without the record
    /// the classic tracepoints fill, so the cheapest per page fault; else the classic
    /// tracepoints; else fentry on the functions they were placed in.
    #[default]
    Auto,
    /// The classic `memcg` tracepoints (the kernel fills their record, cgroup id included,
    /// before the program runs); fentry where the kernel lacks them.
    Tracepoint,
    /// fentry even where the tracepoints exist: the path of 5.11-6.12 kernels, tested on a
    /// newer one.
    Fentry,
}

/// How per-cgroup memory numbers reach the kernel programs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MemcgMethod {
    /// The `memcg` tracepoints hooked as raw tracepoints (6.13+, where BTF gives them the
    /// prototype the programs read): no record filled per update.
    #[serde(rename = "raw_tracepoint")]
    RawTracepoint,
    /// The classic `memcg` tracepoints (6.13+): the kernel fills a record per update.
    Tracepoint,
    /// fentry on the functions those tracepoints were placed in (5.11+).
    Fentry,
}

impl MemcgMethod {
    /// The name `monitor doctor` and its JSON use.
    pub fn as_str(self) -> &'static str {
        match self {
            MemcgMethod::RawTracepoint => "raw_tracepoint",
            MemcgMethod::Tracepoint => "tracepoint",
            MemcgMethod::Fentry => "fentry",
        }
    }
}

/// What the running kernel offers each memcg hook: `Ok` when it can be used, else why not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HookFacts {
    /// The `memcg` tracepoints with the prototype the raw programs read (BTF), and the
    /// struct offsets those programs need.
    pub(crate) raw_tracepoint: Result<(), HookUnavailable>,
    /// Every classic `memcg` tracepoint exists with the record fields its program reads.
    pub(crate) tracepoint: Result<(), HookUnavailable>,
    /// Every function the fentry programs attach to is in BTF with the expected prototype.
    pub(crate) fentry: Result<(), HookUnavailable>,
}

impl HookFacts {
    fn offers(&self, method: MemcgMethod) -> &Result<(), HookUnavailable> {
        match method {
            MemcgMethod::RawTracepoint => &self.raw_tracepoint,
            MemcgMethod::Tracepoint => &self.tracepoint,
            MemcgMethod::Fentry => &self.fentry,
        }
    }
}

/// The hooks to try for what was asked, cheapest first; each comes into play only when the
/// ones before it cannot be used.
pub(crate) fn candidates(asked: MemcgHook) -> &'static [MemcgMethod] {
    match asked {
        MemcgHook::Auto => &[
            MemcgMethod::RawTracepoint,
            MemcgMethod::Tracepoint,
            MemcgMethod::Fentry,
        ],
        MemcgHook::Tracepoint => &[MemcgMethod::Tracepoint, MemcgMethod::Fentry],
        MemcgHook::Fentry => &[MemcgMethod::Fentry],
    }
}

/// The hook the agent will use: the first candidate this kernel offers, or `None` (memory is
/// polled). The choice is what the kernel's BTF and tracefs promise; a kernel or security
/// policy that refuses the attach makes the loader try the next candidate.
pub(crate) fn choose(asked: MemcgHook, facts: &HookFacts) -> Option<MemcgMethod> {
    candidates(asked)
        .iter()
        .copied()
        .find(|method| facts.offers(*method).is_ok())
}

/// Why the candidates before `chosen` were passed over, one clause each.
pub(crate) fn passed_over(
    asked: MemcgHook,
    facts: &HookFacts,
    chosen: Option<MemcgMethod>,
) -> Vec<String> {
    candidates(asked)
        .iter()
        .take_while(|method| Some(**method) != chosen)
        .filter_map(|method| {
            facts
                .offers(*method)
                .as_ref()
                .err()
                .map(|why| format!("{}: {why}", method.as_str()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(raw: bool, tracepoint: bool, fentry: bool) -> HookFacts {
        let offer = |yes: bool| {
            if yes {
                Ok(())
            } else {
                Err(HookUnavailable::NoBtf("absent".into()))
            }
        };
        HookFacts {
            raw_tracepoint: offer(raw),
            tracepoint: offer(tracepoint),
            fentry: offer(fentry),
        }
    }

    #[test]
    fn the_cheapest_hook_the_kernel_offers_for_what_was_asked() {
        struct Case {
            name: &'static str,
            asked: MemcgHook,
            facts: HookFacts,
            chosen: Option<MemcgMethod>,
        }
        let cases = [
            Case {
                name: "6.13+ with BTF: raw tracepoints",
                asked: MemcgHook::Auto,
                facts: facts(true, true, true),
                chosen: Some(MemcgMethod::RawTracepoint),
            },
            Case {
                name: "6.13+ whose tracepoint prototype changed: the classic tracepoints",
                asked: MemcgHook::Auto,
                facts: facts(false, true, true),
                chosen: Some(MemcgMethod::Tracepoint),
            },
            Case {
                name: "5.11-6.12: fentry",
                asked: MemcgHook::Auto,
                facts: facts(false, false, true),
                chosen: Some(MemcgMethod::Fentry),
            },
            Case {
                name: "nothing offered: polled",
                asked: MemcgHook::Auto,
                facts: facts(false, false, false),
                chosen: None,
            },
            Case {
                name: "--memcg-hook tracepoint never takes the raw programs",
                asked: MemcgHook::Tracepoint,
                facts: facts(true, true, true),
                chosen: Some(MemcgMethod::Tracepoint),
            },
            Case {
                name: "--memcg-hook tracepoint without tracepoints: fentry",
                asked: MemcgHook::Tracepoint,
                facts: facts(true, false, true),
                chosen: Some(MemcgMethod::Fentry),
            },
            Case {
                name: "--memcg-hook fentry even where tracepoints exist",
                asked: MemcgHook::Fentry,
                facts: facts(true, true, true),
                chosen: Some(MemcgMethod::Fentry),
            },
        ];
        for case in cases {
            assert_eq!(
                choose(case.asked, &case.facts),
                case.chosen,
                "{}",
                case.name
            );
        }
    }

    #[test]
    fn the_hooks_passed_over_say_why() {
        let facts = facts(false, false, true);
        let why = passed_over(MemcgHook::Auto, &facts, choose(MemcgHook::Auto, &facts));
        assert_eq!(why, ["raw_tracepoint: absent", "tracepoint: absent"]);
    }
}
