//! What root may open of a path a user named, on a real file system. inotify's `IN_OPEN`
//! shows whether a file was opened for real (an `O_PATH` descriptor raises no event), so the
//! tests prove that a FIFO or a device on the path is never opened, not only refused.

use super::*;

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo {}", path.display());
}

/// Whether `path` was opened (for read or write, not `O_PATH`) while `work` ran.
pub(crate) fn opened_during<T>(path: &Path, work: impl FnOnce() -> T) -> (T, bool) {
    // SAFETY: plain inotify calls on a descriptor this function owns; results are checked.
    unsafe {
        let fd = libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC);
        assert!(fd >= 0, "inotify_init1");
        let fd = OwnedFd::from_raw_fd(fd);
        let c = CString::new(path.as_os_str().as_bytes()).unwrap();
        assert!(libc::inotify_add_watch(fd.as_raw_fd(), c.as_ptr(), libc::IN_OPEN) >= 0, "watch");
        let out = work();
        let mut buffer = [0u8; 4096];
        let n = libc::read(fd.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len());
        (out, n > 0)
    }
}

fn error(result: io::Result<File>) -> String {
    let e = result.expect_err("refused");
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    e.to_string()
}

/// Goal: a FIFO at the end of the path is refused without being opened (IN_OPEN), and so is a
/// FIFO behind a link in the middle of the path; a plain file of the right owner opens.
#[test]
fn a_fifo_on_the_path_is_refused_without_being_opened() {
    let dir = tempfile::tempdir().unwrap();
    let me = crate::access::uid::effective();
    let file = dir.path().join("out.log");
    std::fs::write(&file, b"hello").unwrap();
    let mut opened = open_user_file(&file, Some(me)).unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut opened, &mut text).unwrap();
    assert_eq!(text, "hello");
    assert_eq!(
        error(open_user_file(&file, Some(me + 1))),
        format!("owned by uid {me}, not by uid {}", me + 1)
    );

    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    let (result, was_opened) = opened_during(&fifo, || open_user_file(&fifo, Some(me)));
    assert_eq!(error(result), "a FIFO, not a regular file");
    assert!(!was_opened, "the FIFO was never opened");

    let (result, was_opened) = opened_during(&fifo, || open_user_file(&fifo.join("x"), Some(me)));
    assert_eq!(error(result), "fifo: a FIFO, not a directory");
    assert!(!was_opened);
}

/// Goal: a link a user made anywhere on the path is refused; a device is refused unopened.
#[test]
fn a_users_link_or_a_device_on_the_path_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::write(real.join("out.log"), b"x").unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let me = crate::access::uid::effective();
    if me == 0 {
        // Root's own link is followed (no user can make one) ...
        assert!(open_user_file(&link.join("out.log"), None).is_ok());
        // ... a user's is not.
        std::os::unix::fs::lchown(&link, Some(4242), None).unwrap();
        assert_eq!(error(open_user_file(&link.join("out.log"), None)), "link: a symbolic link of uid 4242");
    } else {
        let refusal = error(open_user_file(&link.join("out.log"), None));
        assert_eq!(refusal, format!("link: a symbolic link of uid {me}"));
    }
    let dev_link = dir.path().join("watchdog");
    std::os::unix::fs::symlink("/dev/null", &dev_link).unwrap();
    let refusal = error(open_user_file(Path::new("/dev/null"), None));
    assert_eq!(refusal, "a device, not a regular file");
    let expected = if me == 0 {
        "a device, not a regular file".to_string()
    } else {
        format!("watchdog: a symbolic link of uid {me}")
    };
    assert_eq!(error(open_user_file(&dev_link, None)), expected);
    assert_eq!(error(open_user_file(dir.path(), None)), "a directory, not a regular file");
    assert_eq!(error(open_user_file(Path::new("relative/out.log"), None)), "not an absolute path");
}
