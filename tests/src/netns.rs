//! A network namespace of a test's own, so it may serve and connect on 127.0.0.1 anywhere.

/// Runs `f` on a thread of its own inside a new network namespace whose loopback interface
/// is up, so a test can serve and connect on 127.0.0.1 wherever it runs (the test VM brings
/// no interface up) without touching the machine's own network. Processes started by `f`
/// share the namespace, which goes away with the last of them.
pub fn in_own_network_namespace<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                // SAFETY: changes the network namespace of this thread only.
                let unshared = unsafe { libc::unshare(libc::CLONE_NEWNET) };
                assert_eq!(
                    unshared,
                    0,
                    "unshare(CLONE_NEWNET): {}",
                    std::io::Error::last_os_error()
                );
                loopback_up();
                f()
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Gives the `lo` interface of the current network namespace (one of
/// [`in_own_network_namespace`]) the address `addr` too, under the label `lo:1`: a
/// connection to it comes from it, an address that is not a loopback one, as a client on
/// another host would, without any interface or route outside the namespace.
pub fn add_loopback_alias(addr: std::net::Ipv4Addr) {
    // SAFETY: as in `loopback_up`; the address is written as the `sockaddr_in` the ioctl
    // reads from the union.
    unsafe {
        let socket = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        assert!(socket >= 0, "socket: {}", std::io::Error::last_os_error());
        let mut request: libc::ifreq = std::mem::zeroed();
        for (to, from) in request.ifr_name.iter_mut().zip(b"lo:1\0") {
            *to = *from as libc::c_char;
        }
        let sin = (&raw mut request.ifr_ifru.ifru_addr).cast::<libc::sockaddr_in>();
        (*sin).sin_family = libc::AF_INET as libc::sa_family_t;
        (*sin).sin_addr.s_addr = u32::from(addr).to_be();
        let set = libc::ioctl(socket, libc::SIOCSIFADDR as libc::Ioctl, &request);
        let error = std::io::Error::last_os_error();
        libc::close(socket);
        assert_eq!(set, 0, "SIOCSIFADDR lo:1 {addr}: {error}");
    }
}

/// Sets the `lo` interface of the current network namespace up.
fn loopback_up() {
    // SAFETY: a plain datagram socket used only for the interface ioctls below, closed at
    // the end; `ifreq` is plain data, zeroed before use and only read after the kernel
    // filled it.
    unsafe {
        let socket = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        assert!(socket >= 0, "socket: {}", std::io::Error::last_os_error());
        let mut request: libc::ifreq = std::mem::zeroed();
        for (to, from) in request.ifr_name.iter_mut().zip(b"lo\0") {
            *to = *from as libc::c_char;
        }
        let got = libc::ioctl(socket, libc::SIOCGIFFLAGS as libc::Ioctl, &mut request);
        let error = std::io::Error::last_os_error();
        assert_eq!(got, 0, "SIOCGIFFLAGS lo: {error}");
        request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        let set = libc::ioctl(socket, libc::SIOCSIFFLAGS as libc::Ioctl, &request);
        let error = std::io::Error::last_os_error();
        libc::close(socket);
        assert_eq!(set, 0, "SIOCSIFFLAGS lo: {error}");
    }
}
