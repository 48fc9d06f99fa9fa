//! What systemd's `Type=notify` asks of a service: `READY=1` once it does
//! its job, `STOPPING=1` when it begins to stop, each a datagram to the
//! socket systemd names in `$NOTIFY_SOCKET` (`sd_notify(3)`). A few lines
//! over std's Unix datagram socket; without the variable nothing is sent.

use std::io;
use std::os::unix::net::UnixDatagram;

use tokio_util::sync::CancellationToken;

use result_inbox::consumer::Health;

/// Tells the service manager that `consume` is ready once its delivery
/// stream is open (what `/readyz` also asks), unless `shutdown` came
/// first. Does nothing when no manager listens.
pub(crate) fn ready_when_consuming(health: Health, shutdown: CancellationToken) {
    let Some(socket) = notify_socket() else {
        return;
    };
    tokio::spawn(async move {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => {}
            _ = health.stream_opened() => send(&socket, "READY=1\nSTATUS=consuming"),
        }
    });
}

/// Tells the service manager that the process is stopping: sent at once
/// when the signal arrives, before the drain, so that it never waits for
/// a task the ending runtime may not run again.
pub(crate) fn stopping() {
    if let Some(socket) = notify_socket() {
        send(&socket, "STOPPING=1\nSTATUS=draining in-flight deliveries");
    }
}

fn notify_socket() -> Option<String> {
    std::env::var_os("NOTIFY_SOCKET")
        .filter(|s| !s.is_empty())
        .map(|s| s.to_string_lossy().into_owned())
}

/// Sends one notification; a manager that is gone costs a warning, never
/// the consumer.
fn send(socket: &str, state: &str) {
    if let Err(e) = notify(socket, state) {
        tracing::warn!(socket, error = %e, "could not notify the service manager");
    }
}

/// One datagram of `state` to `socket`: a path, or an abstract name when
/// it starts with `@`.
fn notify(socket: &str, state: &str) -> io::Result<()> {
    let sender = UnixDatagram::unbound()?;
    match socket.strip_prefix('@') {
        Some(name) => send_to_abstract(&sender, name, state)?,
        None => {
            sender.send_to(state.as_bytes(), socket)?;
        }
    }
    Ok(())
}

#[cfg(target_os = "linux")]
fn send_to_abstract(sender: &UnixDatagram, name: &str, state: &str) -> io::Result<()> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    sender.send_to_addr(state.as_bytes(), &addr)?;
    Ok(())
}

/// Abstract socket names are Linux's (as is systemd).
#[cfg(not(target_os = "linux"))]
fn send_to_abstract(_: &UnixDatagram, _: &str, _: &str) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "abstract socket names exist only on Linux",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn a_notification_reaches_a_socket_named_by_path_or_by_abstract_name() {
        let dir = std::env::temp_dir().join(format!("notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let by_path = UnixDatagram::bind(&path).unwrap();
        notify(path.to_str().unwrap(), "READY=1").unwrap();
        let mut buffer = [0u8; 64];
        let n = by_path.recv(&mut buffer).unwrap();
        assert_eq!(&buffer[..n], b"READY=1");

        use std::os::linux::net::SocketAddrExt;
        let name = format!("receiver-notify-test-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let abstract_socket = UnixDatagram::bind_addr(&addr).unwrap();
        notify(&format!("@{name}"), "STOPPING=1").unwrap();
        let n = abstract_socket.recv(&mut buffer).unwrap();
        assert_eq!(&buffer[..n], b"STOPPING=1");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
