//! `errno` values as users read them: the symbolic name and the C library's
//! message, as in `ENOSPC: No space left on device`.

/// The symbolic name of the `errno` values a spool or trace can fail with.
fn name(code: i32) -> Option<&'static str> {
    Some(match code {
        libc::ENOSPC => "ENOSPC",
        libc::EDQUOT => "EDQUOT",
        libc::EFBIG => "EFBIG",
        libc::ENOMEM => "ENOMEM",
        libc::EIO => "EIO",
        libc::EROFS => "EROFS",
        libc::EACCES => "EACCES",
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ENOTDIR => "ENOTDIR",
        libc::EMFILE => "EMFILE",
        libc::ENFILE => "ENFILE",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        _ => return None,
    })
}

/// `NAME: message`, or `errno N: message` for a value without a name here.
pub fn describe(code: i32) -> String {
    let message = std::io::Error::from_raw_os_error(code).to_string();
    let message = message.split(" (os error").next().unwrap_or(&message).to_string();
    match name(code) {
        Some(name) => format!("{name}: {message}"),
        None => format!("errno {code}: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_values_read_as_name_and_message() {
        assert_eq!(describe(libc::ENOSPC), "ENOSPC: No space left on device");
        assert_eq!(describe(libc::EFBIG), "EFBIG: File too large");
        assert_eq!(describe(200), "errno 200: Unknown error 200");
    }
}
