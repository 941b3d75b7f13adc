//! What a path holds when it is not the regular file a reader wants, in words for an error:
//! checked before opening, since a FIFO blocks a read and a device may act on one; and a
//! read of a regular file that stops one byte past its limit.
use std::fs::FileType;
use std::io::Read as _;
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::Path;

/// `a directory`, `a FIFO`, ... for a file type that is not a regular file.
pub(crate) fn describe(file_type: FileType) -> &'static str {
    if file_type.is_dir() {
        "a directory"
    } else if file_type.is_symlink() {
        "a symbolic link"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_block_device() || file_type.is_char_device() {
        "a device"
    } else {
        "not a regular file"
    }
}

/// The text of the regular file at `path`, refused unread when it is another kind of file
/// (a FIFO would block, `/dev/zero` never ends), and refused when longer than `limit` bytes:
/// the read stops one byte past it, however large the file is or grows.
pub(crate) fn read_text(path: &Path, limit: u64) -> std::io::Result<String> {
    let refuse = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, what);
    let file_type = std::fs::metadata(path)?.file_type();
    if !file_type.is_file() {
        return Err(refuse(format!(
            "{}, not a regular file",
            describe(file_type)
        )));
    }
    // Non-blocking, so a file swapped for a FIFO after the look cannot hold the read.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let file_type = file.metadata()?.file_type();
    if !file_type.is_file() {
        return Err(refuse(format!(
            "{}, not a regular file",
            describe(file_type)
        )));
    }
    let mut text = String::new();
    file.take(limit + 1).read_to_string(&mut text)?;
    if text.len() as u64 > limit {
        return Err(refuse(format!(
            "larger than {} MiB; not read further",
            limit >> 20
        )));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_regular_file_within_the_limit_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let small = dir.path().join("small.json");
        std::fs::write(&small, "{}").unwrap();
        assert_eq!(read_text(&small, 1 << 20).unwrap(), "{}");
        let large = dir.path().join("large.json");
        std::fs::write(&large, vec![b' '; (2 << 20) + 1]).unwrap();
        let cases = [
            (large.as_path(), "larger than 2 MiB; not read further"),
            (Path::new("/dev/zero"), "a device, not a regular file"),
            (dir.path(), "a directory, not a regular file"),
        ];
        for (path, want) in cases {
            let error = read_text(path, 2 << 20).unwrap_err();
            assert!(
                error.to_string().contains(want),
                "{}: {error}",
                path.display()
            );
        }
    }
}
