//! Writing a cpio archive in the `newc` format, the one the kernel unpacks as initramfs.
//!
//! Entries are collected first so parent directories are created implicitly and written before
//! their children, whatever order the caller adds files in.
use std::{
    collections::BTreeMap,
    io::{self, Write},
};

const MAGIC: &str = "070701";
const TRAILER: &str = "TRAILER!!!";

#[derive(Debug, PartialEq, Eq)]
enum Entry {
    Dir,
    File { mode: u32, data: Vec<u8> },
    Symlink { target: String },
}

/// The archive's contents, keyed by path without a leading `/`.
#[derive(Debug, Default)]
pub(super) struct Tree {
    entries: BTreeMap<String, Entry>,
}

impl Tree {
    /// Adds a regular file with permission bits `mode` (e.g. 0o755).
    pub(super) fn file(&mut self, path: &str, mode: u32, data: Vec<u8>) {
        self.insert(path, Entry::File { mode, data });
    }

    pub(super) fn symlink(&mut self, path: &str, target: &str) {
        let target = target.to_string();
        self.insert(path, Entry::Symlink { target });
    }

    pub(super) fn dir(&mut self, path: &str) {
        self.insert(path, Entry::Dir);
    }

    fn insert(&mut self, path: &str, entry: Entry) {
        let path = path.trim_matches('/');
        let mut parent = path;
        while let Some((up, _)) = parent.rsplit_once('/') {
            self.entries.entry(up.to_string()).or_insert(Entry::Dir);
            parent = up;
        }
        self.entries.insert(path.to_string(), entry);
    }

    /// Writes the archive. A path sorts before every path below it, so parents come first.
    pub(super) fn write(&self, out: &mut impl Write) -> io::Result<()> {
        let mut written = 0;
        for (ino, (path, entry)) in (1..).zip(&self.entries) {
            let (mode, data): (u32, &[u8]) = match entry {
                Entry::Dir => (0o040_755, &[]),
                Entry::File { mode, data } => (0o100_000 | mode, data),
                Entry::Symlink { target } => (0o120_777, target.as_bytes()),
            };
            written += write_entry(out, written, ino, mode, path, data)?;
        }
        write_entry(out, written, 0, 0, TRAILER, &[])?;
        Ok(())
    }
}

/// Writes one header, name and data, each padded to 4 bytes; returns the bytes written.
fn write_entry(
    out: &mut impl Write,
    offset: usize,
    ino: u32,
    mode: u32,
    name: &str,
    data: &[u8],
) -> io::Result<usize> {
    let nlink = if mode & 0o170_000 == 0o040_000 { 2 } else { 1 };
    let fields = [ino, mode, 0, 0, nlink, 0, len32(data.len())?, 0, 0, 0, 0];
    let mut header = String::from(MAGIC);
    for field in fields {
        header.push_str(&format!("{field:08x}"));
    }
    header.push_str(&format!("{:08x}{:08x}", len32(name.len() + 1)?, 0));
    let mut bytes = header.into_bytes();
    bytes.extend_from_slice(name.as_bytes());
    bytes.push(0);
    pad(&mut bytes, offset);
    bytes.extend_from_slice(data);
    pad(&mut bytes, offset);
    out.write_all(&bytes)?;
    Ok(bytes.len())
}

/// Pads with NULs so the archive so far (`offset` + `bytes`) ends on a 4-byte boundary.
fn pad(bytes: &mut Vec<u8>, offset: usize) {
    bytes.resize((offset + bytes.len()).next_multiple_of(4) - offset, 0);
}

fn len32(len: usize) -> io::Result<u32> {
    u32::try_from(len).map_err(|_| io::Error::other("cpio newc entries are limited to 4 GiB"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER_LEN: usize = 110;

    /// (name, mode, data) of every entry, read back the way the kernel's unpacker does.
    fn read_back(archive: &[u8]) -> Vec<(String, u32, Vec<u8>)> {
        let mut entries = Vec::new();
        let mut at = 0;
        loop {
            assert_eq!(at % 4, 0, "headers are 4-byte aligned");
            assert_eq!(&archive[at..at + 6], MAGIC.as_bytes());
            let field = |i: usize| {
                let hex = std::str::from_utf8(&archive[at + 6 + 8 * i..at + 14 + 8 * i]).unwrap();
                usize::from_str_radix(hex, 16).unwrap()
            };
            let (mode, size, namesize) = (field(1), field(6), field(11));
            let name_start = at + HEADER_LEN;
            let name = &archive[name_start..name_start + namesize - 1];
            assert_eq!(archive[name_start + namesize - 1], 0, "names end with NUL");
            let data_start = (name_start + namesize).next_multiple_of(4);
            let name = String::from_utf8(name.to_vec()).unwrap();
            if name == TRAILER {
                assert_eq!(archive.len(), data_start);
                return entries;
            }
            let data = archive[data_start..data_start + size].to_vec();
            entries.push((name, mode as u32, data));
            at = (data_start + size).next_multiple_of(4);
        }
    }

    #[test]
    fn parents_are_created_and_written_first() {
        let mut tree = Tree::default();
        tree.file("/lib/x86_64-linux-gnu/libc.so.6", 0o644, b"elf".to_vec());
        tree.symlink("bin/sh", "busybox");
        tree.file("init", 0o755, b"#!/bin/busybox sh\n".to_vec());
        let mut archive = Vec::new();
        tree.write(&mut archive).unwrap();
        let entries = read_back(&archive);
        let names: Vec<&str> = entries.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(
            names,
            [
                "bin",
                "bin/sh",
                "init",
                "lib",
                "lib/x86_64-linux-gnu",
                "lib/x86_64-linux-gnu/libc.so.6"
            ]
        );
        assert_eq!(entries[0].1, 0o040_755);
        assert_eq!(
            (entries[1].1, entries[1].2.as_slice()),
            (0o120_777, &b"busybox"[..])
        );
        assert_eq!((entries[2].1, entries[2].2.len()), (0o100_755, 18));
        assert_eq!(entries[5].1, 0o100_644);
    }

    #[test]
    fn odd_sizes_are_padded() {
        for len in 0..9 {
            let mut tree = Tree::default();
            tree.file(&"n".repeat(len + 1), 0o644, vec![7; len]);
            let mut archive = Vec::new();
            tree.write(&mut archive).unwrap();
            assert_eq!(read_back(&archive)[0].2, vec![7; len]);
        }
    }
}
