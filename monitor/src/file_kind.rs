//! What a path holds when it is not the regular file a reader wants, in words for an error:
//! checked before opening, since a FIFO blocks a read and a device may act on one.
use std::fs::FileType;
use std::os::unix::fs::FileTypeExt as _;

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
