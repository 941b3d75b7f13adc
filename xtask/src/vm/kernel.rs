//! Debian's cloud kernels: 6.1 and 6.12 from Debian 12 and 5.10 from Debian 11 for the test
//! matrix, and a 6.18 from
//! Debian 13's backports for the hook benchmark. Each is downloaded once with `apt-get
//! download`, unpacked with `dpkg-deb -x`, and kept under the VM work directory. All have BTF,
//! the BPF ring buffer and the cgroup tracepoints; 6.1 and 6.12 lack the memcg ones (6.13), so
//! the agent counts memory there with fentry, while 6.18 offers both hooks. They boot without
//! modules as long as no disk is attached (virtio is modular there). ext4 is built in; the RAM
//! disk driver `brd` is a module the initramfs carries.
use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use crate::{arch::Arch, process::status};

/// A Debian kernel series the VM boots: packages `<prefix><number><suffix>`, newest number
/// taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Series {
    /// The kernel version the releases start with, e.g. `6.12`.
    pub version: &'static str,
    prefix: &'static str,
    suffix: &'static str,
    /// Directory under the VM work directory holding the unpacked package.
    dir: &'static str,
    /// Where apt finds the package.
    archive: Archive,
    /// The architecture it is built for, which the VM emulates.
    pub arch: Arch,
}

/// The apt archive a kernel package comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Archive {
    /// The machine's own sources (Debian 12 and its security archive); for another
    /// architecture the same suites through lists of its own (see [`AptOptions`]).
    System,
    /// A suite of deb.debian.org the machine does not list: apt reads it through a sources
    /// list and package lists of its own under the VM work directory, verified with Debian's
    /// archive keyring, and the machine's apt state is left alone.
    Suite(&'static str),
}

/// The kernels of the VM matrix: Debian 12's own (ABI-numbered), its 6.12 from the security
/// archive, and Debian 11's 5.10, the poll tier (its BTF lacks a stat item the programs
/// count: the agent polls, woken by PSI).
pub(super) const SERIES: [Series; 3] = [
    Series {
        version: "6.1",
        prefix: "linux-image-6.1.0-",
        suffix: "-cloud-amd64-unsigned",
        dir: "kernel",
        archive: Archive::System,
        arch: Arch::X86_64,
    },
    Series {
        version: "6.12",
        prefix: "linux-image-6.12.",
        suffix: "+deb12-cloud-amd64-unsigned",
        dir: "kernel-6.12",
        archive: Archive::System,
        arch: Arch::X86_64,
    },
    Series {
        version: POLL_TIER,
        prefix: "linux-image-5.10.0-",
        suffix: "-cloud-amd64-unsigned",
        dir: "kernel-5.10",
        archive: Archive::Suite("bullseye"),
        arch: Arch::X86_64,
    },
];

/// The arm64 kernels: Debian 12's cloud 6.12, counting memory with fentry; its 6.1, which
/// refuses fentry on kernel functions (ENOTSUPP: arm64 attaches them through ftrace's direct
/// calls, `DYNAMIC_FTRACE_WITH_DIRECT_CALLS`, from 6.4), where the agent polls memory and
/// keeps its other kernel programs; and Debian 11's 5.10, the poll tier as on x86_64.
pub(super) const ARM64_SERIES: [Series; 3] = [
    Series {
        version: "6.12",
        prefix: "linux-image-6.12.",
        suffix: "+deb12-cloud-arm64-unsigned",
        dir: "kernel-arm64-6.12",
        archive: Archive::System,
        arch: Arch::Aarch64,
    },
    Series {
        version: "6.1",
        prefix: "linux-image-6.1.0-",
        suffix: "-cloud-arm64-unsigned",
        dir: "kernel-arm64-6.1",
        archive: Archive::System,
        arch: Arch::Aarch64,
    },
    Series {
        version: POLL_TIER,
        prefix: "linux-image-5.10.0-",
        suffix: "-cloud-arm64-unsigned",
        dir: "kernel-arm64-5.10",
        archive: Archive::Suite("bullseye"),
        arch: Arch::Aarch64,
    },
];

/// The series of the poll tier, whose VM runs [`super::POLL_TIER_TESTS`] alone.
pub(super) const POLL_TIER: &str = "5.10";
/// The arm64 series that refuses fentry: memory polled, the other kernel programs kept.
pub(super) const ARM64_NO_FENTRY: &str = "6.1";

/// A kernel with both the memcg tracepoints (6.13+) and the functions the fentry programs
/// attach to, so the hook benchmark compares the two on one kernel: Debian 13's backported
/// 6.18 (the host's series), newest release taken.
pub(super) const BOTH_HOOKS: Series = Series {
    version: "6.18",
    prefix: "linux-image-6.18.",
    suffix: "+deb13-cloud-amd64",
    dir: "kernel-6.18",
    archive: Archive::Suite("trixie-backports"),
    arch: Arch::X86_64,
};

/// What the VM boots: the kernel image and the one module it loads.
pub(super) struct Kernel {
    pub image: PathBuf,
    /// `brd.ko`, the RAM disk driver.
    pub ramdisk_module: PathBuf,
}

/// The kernel of `series`, downloading and unpacking the package on first use.
pub(super) fn ensure(work: &Path, series: Series) -> anyhow::Result<Kernel> {
    let image = unpacked_image(work, series)?;
    let unpacked = work.join(series.dir);
    let ramdisk_module = find_module(&unpacked, "drivers/block/brd.ko").with_context(|| {
        format!(
            "no drivers/block/brd.ko under {}/(usr/)lib/modules; remove that directory to unpack \
             the kernel again",
            unpacked.display()
        )
    })?;
    Ok(Kernel {
        image,
        ramdisk_module,
    })
}

/// The image under the series' directory, downloading and unpacking the package there first if
/// needed.
fn unpacked_image(work: &Path, series: Series) -> anyhow::Result<PathBuf> {
    let unpacked = &work.join(series.dir);
    if let Some(vmlinuz) = find_vmlinuz(unpacked) {
        return Ok(vmlinuz);
    }
    fs::create_dir_all(work).with_context(|| format!("creating {}", work.display()))?;
    let apt = AptOptions::for_series(work, series)?;
    let package = newest_package(series, &apt)?;
    eprintln!("vm-test: downloading {package}");
    status(
        Command::new("apt-get")
            .args(["download", "-q", "-o", "APT::Sandbox::User=root"])
            .args(&apt.args)
            .arg(&package)
            .current_dir(work),
    )?;
    let deb = fs::read_dir(work)?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{package}_")) && n.ends_with(".deb"))
        })
        .with_context(|| {
            format!(
                "apt-get download left no {package} .deb in {}",
                work.display()
            )
        })?;
    // Unpack beside the cache and rename, so an interrupted run leaves no half kernel behind.
    let partial = work.join(format!("{}.partial", series.dir));
    let _ = fs::remove_dir_all(&partial);
    status(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&partial))?;
    fs::rename(&partial, unpacked)?;
    fs::remove_file(&deb)?;
    find_vmlinuz(unpacked).with_context(|| format!("no boot/vmlinuz-* in {}", deb.display()))
}

fn find_vmlinuz(unpacked: &Path) -> Option<PathBuf> {
    fs::read_dir(unpacked.join("boot"))
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
        })
}

/// `relative` (below `kernel/`) in the one version directory under `lib/modules`. Kernels
/// from 6.12 ship modules xz-compressed, which busybox's insmod cannot load: those are
/// decompressed beside the original once.
fn find_module(unpacked: &Path, relative: &str) -> Option<PathBuf> {
    // Debian 13's packages put modules under usr/ (merged /usr).
    let module = ["lib/modules", "usr/lib/modules"]
        .iter()
        .filter_map(|dir| fs::read_dir(unpacked.join(dir)).ok())
        .flat_map(Iterator::flatten)
        .map(|version| version.path().join("kernel").join(relative))
        .find(|module| module.is_file() || compressed(module).is_file())?;
    if !module.is_file() {
        status(Command::new("xz").arg("-dk").arg(compressed(&module))).ok()?;
    }
    Some(module)
}

fn compressed(module: &Path) -> PathBuf {
    let mut name = module.as_os_str().to_owned();
    name.push(".xz");
    PathBuf::from(name)
}

/// Options that point apt at a series' archive: none for the machine's own sources and
/// architecture. Another suite or architecture gets a sources list, package lists and a cache
/// of its own under the VM work directory, verified with Debian's archive keyring, so the
/// machine's apt state is left alone.
pub(super) struct AptOptions {
    /// apt's `-o` options.
    pub args: Vec<String>,
    /// The package lists of its own, if any.
    lists: Option<PathBuf>,
}

impl AptOptions {
    fn for_series(work: &Path, series: Series) -> anyhow::Result<Self> {
        match (series.archive, series.arch) {
            (Archive::System, Arch::X86_64) => Ok(Self::system()),
            (Archive::System, arch) => Self::for_arch(work, arch),
            (Archive::Suite(suite), Arch::X86_64) => Self::private(
                work,
                &format!("apt-{suite}"),
                &suite_sources(suite, Arch::X86_64),
                Arch::X86_64,
            ),
            (Archive::Suite(suite), arch) => Self::private(
                work,
                &format!("apt-{suite}-{}", arch.oci()),
                &suite_sources(suite, arch),
                arch,
            ),
        }
    }

    /// The machine's own sources and lists.
    pub(super) fn system() -> Self {
        Self {
            args: Vec::new(),
            lists: None,
        }
    }

    /// Fetches the package lists of its own when there are none yet.
    pub(super) fn fetch_lists_once(&self) -> anyhow::Result<()> {
        let Some(lists) = &self.lists else {
            return Ok(());
        };
        let fetched = fs::read_dir(lists).is_ok_and(|mut entries| {
            entries.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().ends_with("_Packages")))
        });
        if fetched {
            return Ok(());
        }
        status(
            Command::new("apt-get")
                .args(["update", "-qq", "-o", "APT::Sandbox::User=root"])
                .args(&self.args),
        )
    }

    /// Debian 12's suites (those the machine lists) for `arch`.
    pub(super) fn for_arch(work: &Path, arch: Arch) -> anyhow::Result<Self> {
        let sources = [
            ("debian", "bookworm"),
            ("debian-security", "bookworm-security"),
        ]
        .map(|(archive, suite)| source_line(archive, suite, arch))
        .concat();
        Self::private(work, &format!("apt-{}", arch.oci()), &sources, arch)
    }

    fn private(work: &Path, name: &str, sources_list: &str, arch: Arch) -> anyhow::Result<Self> {
        let dir = work.join(name);
        let lists = dir.join("lists");
        let cache = dir.join("cache");
        for made in [lists.join("partial"), cache.join("archives/partial")] {
            fs::create_dir_all(&made).with_context(|| format!("creating {}", made.display()))?;
        }
        let sources = dir.join("sources.list");
        fs::write(&sources, sources_list)
            .with_context(|| format!("writing {}", sources.display()))?;
        let mut options = vec![
            ("Dir::Etc::SourceList", sources.display().to_string()),
            ("Dir::Etc::SourceParts", "/dev/null".to_string()),
            ("Dir::State::Lists", lists.display().to_string()),
            ("Dir::Cache", cache.display().to_string()),
        ];
        if arch != Arch::X86_64 {
            // The machine's dpkg knows amd64 alone: apt is told of no other installed state.
            options.extend([
                ("APT::Architecture", arch.oci().to_string()),
                ("APT::Architectures", arch.oci().to_string()),
                ("Dir::State::status", "/dev/null".to_string()),
            ]);
        }
        Ok(Self {
            args: options
                .iter()
                .flat_map(|(key, value)| ["-o".to_string(), format!("{key}={value}")])
                .collect(),
            lists: Some(lists),
        })
    }
}

/// A one-line sources list for `suite` of Debian's main archive, signed by its keyring.
fn suite_sources(suite: &str, arch: Arch) -> String {
    source_line("debian", suite, arch)
}

fn source_line(archive: &str, suite: &str, arch: Arch) -> String {
    format!(
        "deb [arch={} signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] \
         http://deb.debian.org/{archive} {suite} main\n",
        arch.oci()
    )
}

/// The newest package of `series` apt knows, refreshing the package lists if it knows none.
fn newest_package(series: Series, apt: &AptOptions) -> anyhow::Result<String> {
    let pattern = format!(
        "^{}[0-9]+{}$",
        regex_quote(series.prefix),
        regex_quote(series.suffix)
    );
    let search = || -> anyhow::Result<Option<String>> {
        let out = Command::new("apt-cache")
            .args(&apt.args)
            .args(["search", "--names-only", &pattern])
            .output()
            .context("running apt-cache search")?;
        Ok(newest(&String::from_utf8_lossy(&out.stdout), series))
    };
    if let Some(package) = search()? {
        return Ok(package);
    }
    status(
        Command::new("apt-get")
            .args(["update", "-qq", "-o", "APT::Sandbox::User=root"])
            .args(&apt.args),
    )?;
    match (search()?, series.archive) {
        (Some(package), _) => Ok(package),
        (None, Archive::System) => bail!(
            "apt knows no {}N{} package; is this Debian 12 with its security archive?",
            series.prefix,
            series.suffix
        ),
        (None, Archive::Suite(suite)) => bail!(
            "Debian's {suite} lists no {}N{} package any more; pick another series in {}",
            series.prefix,
            series.suffix,
            file!()
        ),
    }
}

/// `text` with the regex metacharacters package names can hold (`.` and `+`) escaped.
fn regex_quote(text: &str) -> String {
    text.replace('.', r"\.").replace('+', r"\+")
}

/// The package with the highest number in `apt-cache search` output.
fn newest(search_output: &str, series: Series) -> Option<String> {
    search_output
        .lines()
        .filter_map(|line| {
            let name = line.split_whitespace().next()?;
            let number: u32 = name
                .strip_prefix(series.prefix)?
                .strip_suffix(series.suffix)?
                .parse()
                .ok()?;
            Some((number, name.to_string()))
        })
        .max()
        .map(|(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn highest_abi_wins_numerically() {
        let out = "linux-image-6.1.0-9-cloud-amd64-unsigned - Linux 6.1 for x86-64 cloud\n\
            linux-image-6.1.0-57-cloud-amd64-unsigned - Linux 6.1 for x86-64 cloud\n\
            linux-image-6.1.0-10-cloud-amd64-unsigned - Linux 6.1 for x86-64 cloud\n";
        assert_eq!(
            newest(out, SERIES[0]).as_deref(),
            Some("linux-image-6.1.0-57-cloud-amd64-unsigned")
        );
        assert_eq!(newest("", SERIES[0]), None);
        assert_eq!(newest(out, SERIES[1]), None, "6.1 is not 6.12");
    }

    #[test]
    fn the_6_12_series_is_numbered_by_its_point_release() {
        let out = "linux-image-6.12.9+deb12-cloud-amd64-unsigned - Linux 6.12 for x86-64 cloud\n\
            linux-image-6.12.117+deb12-cloud-amd64-unsigned - Linux 6.12 for x86-64 cloud\n\
            linux-image-6.12.117+deb12-amd64-unsigned - Linux 6.12 for 64-bit PCs\n";
        assert_eq!(
            newest(out, SERIES[1]).as_deref(),
            Some("linux-image-6.12.117+deb12-cloud-amd64-unsigned")
        );
        assert_eq!(newest(out, SERIES[0]), None);
    }

    #[test]
    fn other_flavours_are_ignored() {
        let out = "linux-image-6.1.0-57-amd64-unsigned - Linux 6.1 for 64-bit PCs\n\
            linux-image-6.1.0-57-cloud-amd64-dbg - debug symbols\n";
        assert_eq!(newest(out, SERIES[0]), None);
    }

    #[test]
    fn the_both_hooks_kernel_is_the_signed_image_not_its_debug_symbols() {
        let out = "linux-image-6.18.9+deb13-cloud-amd64 - Linux 6.18.9 for x86-64 cloud (signed)\n\
            linux-image-6.18.15+deb13-cloud-amd64 - Linux 6.18.15 for x86-64 cloud (signed)\n\
            linux-image-6.18.15+deb13-cloud-amd64-dbg - debug symbols\n\
            linux-image-7.3.4+deb13-cloud-amd64 - Linux 7.3.4 for x86-64 cloud\n";
        assert_eq!(
            newest(out, BOTH_HOOKS).as_deref(),
            Some("linux-image-6.18.15+deb13-cloud-amd64")
        );
    }

    #[test]
    fn a_suite_gets_its_own_lists_and_the_system_none() {
        let work = Path::new("/tmp/vm");
        assert!(
            AptOptions::for_series(work, SERIES[0])
                .unwrap()
                .args
                .is_empty()
        );
        let work = std::env::temp_dir().join(format!("xtask-apt-{}", std::process::id()));
        let apt = AptOptions::for_series(&work, BOTH_HOOKS).unwrap().args;
        let lists = work.join("apt-trixie-backports/lists");
        assert!(apt.contains(&format!("Dir::State::Lists={}", lists.display())));
        assert!(apt.contains(&"Dir::Etc::SourceParts=/dev/null".to_string()));
        assert!(lists.join("partial").is_dir());
        let sources = fs::read_to_string(work.join("apt-trixie-backports/sources.list")).unwrap();
        assert_eq!(
            sources,
            "deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] \
             http://deb.debian.org/debian trixie-backports main\n"
        );
        // Another architecture: the machine's suites, its own lists, and no dpkg state.
        let apt = AptOptions::for_series(&work, ARM64_SERIES[0]).unwrap().args;
        assert!(apt.contains(&"APT::Architecture=arm64".to_string()));
        assert!(apt.contains(&"Dir::State::status=/dev/null".to_string()));
        let sources = fs::read_to_string(work.join("apt-arm64/sources.list")).unwrap();
        assert!(sources.contains("[arch=arm64 "), "{sources}");
        assert!(sources.contains("/debian bookworm main\n"), "{sources}");
        assert!(
            sources.contains("/debian-security bookworm-security main\n"),
            "{sources}"
        );
        fs::remove_dir_all(&work).unwrap();
    }
}
