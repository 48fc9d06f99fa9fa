//! The receiver's log: stderr, text or JSON, filtered as the environment
//! says.

/// The log filter when neither RECEIVER_LOG nor RUST_LOG is set: one line
/// per delivery, warnings from everything else, and sqlx's own slow-statement
/// and slow-acquire warnings left out (the receiver reports its outcomes
/// itself, redacted).
pub(crate) const DEFAULT_LOG_FILTER: &str = "warn,result_inbox=info,receiver=info,sqlx=error";

/// stderr logging as RECEIVER_LOG (else RUST_LOG) and RECEIVER_LOG_FORMAT
/// say. A filter or format that cannot be read is a configuration error,
/// never a silent fall-back to the default. For a command that logs a
/// start-up line (`announces`), a filter that leaves the receiver's own
/// info lines out says so once.
pub(crate) fn init_logging(announces: bool) -> Result<(), String> {
    use tracing_subscriber::filter::Targets;
    use tracing_subscriber::filter::{filter_fn, FilterExt};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    // An empty variable is taken as unset, as env_logger does.
    let set = |name| std::env::var(name).ok().filter(|f| !f.trim().is_empty());
    let (variable, filter) = match (set("RECEIVER_LOG"), set("RUST_LOG")) {
        (Some(f), _) => ("RECEIVER_LOG", f),
        (None, Some(f)) => ("RUST_LOG", f),
        (None, None) => ("", DEFAULT_LOG_FILTER.to_owned()),
    };
    let own_level =
        readable(&filter).map_err(|e| format!("{variable}: invalid log filter: {e}"))?;
    // `info, receiver=debug` as people write lists: the parser would take
    // the space for part of the target.
    let filter = directives(&filter).collect::<Vec<_>>().join(",");
    let targets = filter
        .parse::<Targets>()
        .map_err(|e| format!("{variable}: invalid log filter: {e}"))?;
    if announces && own_level < tracing::level_filters::LevelFilter::INFO {
        report_warning(&format!(
            "{variable}={filter:?} leaves out the receiver's own info lines (its start-up line, two lines per delivery); add receiver=info,result_inbox=info to see them"
        ));
    }
    // At debug and below the NATS client prints server addresses with their
    // passwords and every message's payload (result bodies): never more than
    // info from it, whatever the filter allows, and no more than it allows.
    let cap = filter_fn(|meta| {
        !(meta.target().starts_with(NATS_CLIENT) && *meta.level() > tracing::Level::INFO)
    });
    // The log is one line per event: the library's spans (a delivery's
    // processing, its transaction, each statement) are for a trace
    // exporter, not a prefix on every line. Asked first, so that a span
    // costs the log no look-up in the filter's directives.
    let filter = filter_fn(|meta| !meta.is_span()).and(targets).and(cap);
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let log = match format()? {
        Format::Text => layer.with_filter(filter).boxed(),
        Format::Json => layer.json().flatten_event(true).with_filter(filter).boxed(),
    };
    // A list of layers rather than an optional one: an absent `Option`
    // layer reports "nothing enabled" as its level hint, which would cap
    // the log's own levels.
    let mut layers = vec![log];
    // Traces, when an endpoint is configured: the receiver's own spans at
    // info and above, and the warnings and errors in them, whatever the
    // log's filter. A delivery's info lines stay in the log: what they
    // say is its span's attributes already.
    if let Some(traces) = crate::otel::layer()? {
        let own = filter_fn(|meta| {
            let level = if meta.is_span() {
                tracing::Level::INFO
            } else {
                tracing::Level::WARN
            };
            *meta.level() <= level
                && (meta.target().starts_with("result_inbox")
                    || meta.target().starts_with("receiver"))
        });
        layers.push(traces.with_filter(own).boxed());
    }
    tracing_subscriber::registry().with(layers).init();
    Ok(())
}

/// How the log is written.
enum Format {
    Text,
    Json,
}

/// RECEIVER_LOG_FORMAT, in any case, as every enumerated setting is read.
fn format() -> Result<Format, String> {
    match std::env::var("RECEIVER_LOG_FORMAT") {
        Err(_) => Ok(Format::Text),
        Ok(value) if value.eq_ignore_ascii_case("text") => Ok(Format::Text),
        Ok(value) if value.eq_ignore_ascii_case("json") => Ok(Format::Json),
        Ok(other) => Err(format!(
            "RECEIVER_LOG_FORMAT: invalid value {other:?}; possible values: text, json"
        )),
    }
}

/// Writes the error a command ends with: one line on stderr, a JSON object
/// like every other log line when RECEIVER_LOG_FORMAT asks for JSON, and
/// whatever the log filter says (the last line must never be filtered out).
pub(crate) fn report_fatal(message: &str, exit_code: u8) {
    if json_requested() {
        unfiltered_json(|| tracing::error!(target: "receiver", exit_code, "{message}"));
    } else {
        eprintln!("receiver: {message}");
    }
}

/// Writes a warning meant for the person running the command, in the log's
/// format and whatever the filter says.
pub(crate) fn report_warning(message: &str) {
    if json_requested() {
        unfiltered_json(|| tracing::warn!(target: "receiver", "{message}"));
    } else {
        eprintln!("warning: {message}");
    }
}

fn json_requested() -> bool {
    matches!(format(), Ok(Format::Json))
}

/// Runs `emit` with a JSON subscriber of its own on stderr, which no filter
/// stands in front of.
fn unfiltered_json(emit: impl FnOnce()) {
    let subscriber = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, emit);
}

/// Reads each directive of a filter as the README describes them (`level`
/// or `target=level`, comma-separated), refusing what the parser would
/// take for something else: a bare word that is no level (`debugg` would
/// be a target, logging nothing else), a directive with a space in it, or
/// a span's name or fields in brackets (`env_logger`'s and `EnvFilter`'s
/// `target[span{field=value}]`, which this filter has no means to read).
/// Returns the level the filter gives the receiver's own lines.
fn readable(filter: &str) -> Result<tracing::level_filters::LevelFilter, String> {
    use tracing::level_filters::LevelFilter;
    let level = |text: &str| text.parse::<LevelFilter>().ok();
    let mut own: Option<(usize, LevelFilter)> = None;
    let mut everything = LevelFilter::ERROR;
    for directive in directives(filter) {
        if directive.chars().any(char::is_whitespace) {
            return Err(format!("{directive:?} holds a space"));
        }
        if directive.contains(['[', ']', '{', '}']) {
            return Err(format!(
                "{directive:?} filters by span; only level and target=level are read"
            ));
        }
        match directive.split_once('=') {
            None => {
                everything = level(directive).ok_or_else(|| {
                    format!("{directive:?} is neither a level (trace, debug, info, warn, error, off) nor target=level")
                })?;
            }
            Some((target, value)) => {
                let Some(value) = level(value) else {
                    return Err(format!(
                        "{directive:?}: {value:?} is not a level (trace, debug, info, warn, error, off)"
                    ));
                };
                let longer = own.is_none_or(|(len, _)| target.len() >= len);
                if OWN_TARGET.starts_with(target) && longer {
                    own = Some((target.len(), value));
                }
            }
        }
    }
    Ok(own.map_or(everything, |(_, level)| level))
}

/// The directives of a filter, each without the spaces around it.
fn directives(filter: &str) -> impl Iterator<Item = &str> {
    filter.split(',').map(str::trim).filter(|d| !d.is_empty())
}

/// The target of the receiver's start-up line.
const OWN_TARGET: &str = "receiver::commands::consume";

/// The NATS client's log target.
const NATS_CLIENT: &str = "async_nats";
