//! The receiver's log: stderr, text or JSON, filtered as the environment
//! says.

/// The log filter when neither RECEIVER_LOG nor RUST_LOG is set: one line
/// per delivery, warnings from everything else, and sqlx's own slow-statement
/// and slow-acquire warnings left out (the receiver reports its outcomes
/// itself, redacted).
pub(crate) const DEFAULT_LOG_FILTER: &str = "warn,result_inbox=info,receiver=info,sqlx=error";

/// The most the NATS client may log, whatever the filter says.
pub(crate) const NATS_CLIENT_LOG_CAP: &str = "async_nats=info";

/// stderr logging as RECEIVER_LOG (else RUST_LOG) and RECEIVER_LOG_FORMAT
/// say. A filter or format that cannot be read is a configuration error,
/// never a silent fall-back to the default.
pub(crate) fn init_logging() -> Result<(), String> {
    use tracing_subscriber::EnvFilter;
    // An empty variable is taken as unset, as env_logger does.
    let set = |name| std::env::var(name).ok().filter(|f| !f.trim().is_empty());
    let (variable, filter) = match (set("RECEIVER_LOG"), set("RUST_LOG")) {
        (Some(f), _) => ("RECEIVER_LOG", f),
        (None, Some(f)) => ("RUST_LOG", f),
        (None, None) => ("", DEFAULT_LOG_FILTER.to_owned()),
    };
    let filter = EnvFilter::builder()
        .parse(&filter)
        .map_err(|e| format!("{variable}: invalid log filter: {e}"))?
        // At debug and below the NATS client prints server addresses with
        // their passwords and every message's payload (result bodies).
        .add_directive(NATS_CLIENT_LOG_CAP.parse().expect("a valid directive"));
    let json = match std::env::var("RECEIVER_LOG_FORMAT").as_deref() {
        Err(_) | Ok("text") => false,
        Ok("json") => true,
        Ok(other) => {
            return Err(format!(
                "RECEIVER_LOG_FORMAT: {other:?} is neither \"text\" nor \"json\""
            ))
        }
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    if json {
        builder.json().flatten_event(true).init();
    } else {
        builder.init();
    }
    Ok(())
}
