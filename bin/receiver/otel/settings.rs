//! What the standard variables say about the export, read once and
//! checked: where traces go (an `http://` or `https://` URL), over which
//! protocol (`http/protobuf`, the only one the receiver speaks) and with
//! which sampler. A value that cannot be read is refused naming its
//! variable, never replaced by a default: a receiver that exports nothing
//! while its operator believes it does is what this prevents.

use opentelemetry_sdk::trace::Sampler;

/// The traces' own endpoint, used as it is.
const TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
/// The base endpoint of every signal, to which `/v1/traces` is added.
const BASE_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// The path of traces under a base endpoint.
const TRACES_PATH: &str = "/v1/traces";
const SAMPLER: &str = "OTEL_TRACES_SAMPLER";
const SAMPLER_ARG: &str = "OTEL_TRACES_SAMPLER_ARG";

/// A variable's value, an empty one taken as unset (as the SDK does).
fn set(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Where traces go.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    /// The URL requests go to, credentials and query included.
    pub(crate) url: String,
    /// The variable it came from.
    pub(crate) variable: &'static str,
    /// A base endpoint that named the traces' path already: requests go to
    /// `…/v1/traces/v1/traces`.
    doubled: bool,
}

impl Endpoint {
    /// The endpoint the variables configure, if any: the traces' own, else
    /// the base one with `/v1/traces` added.
    pub(crate) fn configured() -> Result<Option<Endpoint>, String> {
        let endpoint = if let Some(url) = set(TRACES_ENDPOINT) {
            Endpoint {
                url: url.trim().to_owned(),
                variable: TRACES_ENDPOINT,
                doubled: false,
            }
        } else if let Some(base) = set(BASE_ENDPOINT) {
            let base = base.trim().trim_end_matches('/');
            Endpoint {
                url: format!("{base}{TRACES_PATH}"),
                variable: BASE_ENDPOINT,
                doubled: base.ends_with(TRACES_PATH),
            }
        } else {
            return Ok(None);
        };
        endpoint.check()?;
        Ok(Some(endpoint))
    }

    /// An `http://` or `https://` URL with a host. The message never holds
    /// the value, which may carry a password.
    fn check(&self) -> Result<(), String> {
        let variable = self.variable;
        let example = "such as http://127.0.0.1:4318";
        let uri: http::Uri = self.url.parse().map_err(|_| {
            format!("{variable}: not a URL; an OTLP/HTTP collector's address, {example}")
        })?;
        match uri.scheme_str() {
            Some(s) if s.eq_ignore_ascii_case("http") || s.eq_ignore_ascii_case("https") => {}
            // A scheme is letters, digits, `+`, `-` and `.`: nothing secret.
            Some(other) => {
                return Err(format!(
                    "{variable}: the scheme {other}:// is not http:// or https:// (traces go over OTLP/HTTP), {example}"
                ))
            }
            None => {
                return Err(format!(
                    "{variable}: no scheme; an OTLP/HTTP collector's address starts with http:// or https://, {example}"
                ))
            }
        }
        if uri.host().is_none_or(str::is_empty) {
            return Err(format!("{variable}: no host, {example}"));
        }
        Ok(())
    }

    /// The endpoint as it may be printed: a `user:password@` as
    /// `<redacted>@`, no query or fragment (an API key may ride there).
    pub(crate) fn shown(&self) -> String {
        shown(&self.url)
    }

    /// The warning for a base endpoint that already ends in `/v1/traces`.
    pub(crate) fn warning(&self) -> Option<String> {
        self.doubled.then(|| {
            format!(
                "{BASE_ENDPOINT} ends in {TRACES_PATH}, to which the exporter adds {TRACES_PATH} again: traces go to {}; give the collector's base address, or the whole URL as {TRACES_ENDPOINT}",
                self.shown()
            )
        })
    }
}

/// `url` without its credentials, query and fragment.
fn shown(url: &str) -> String {
    let url = url.split(['?', '#']).next().unwrap_or_default();
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((_, host)) => format!("{scheme}://<redacted>@{host}{path}"),
        None => url.to_owned(),
    }
}

/// The protocol of the traces (`OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, else
/// `OTEL_EXPORTER_OTLP_PROTOCOL`): only `http/protobuf`, the default, is
/// spoken; the exporter would ignore any other and send protobuf anyway.
pub(crate) fn check_protocol() -> Result<(), String> {
    let (variable, value) = match (
        set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"),
        set("OTEL_EXPORTER_OTLP_PROTOCOL"),
    ) {
        (Some(value), _) => ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", value),
        (None, Some(value)) => ("OTEL_EXPORTER_OTLP_PROTOCOL", value),
        (None, None) => return Ok(()),
    };
    if value.trim().eq_ignore_ascii_case("http/protobuf") {
        Ok(())
    } else {
        Err(format!(
            "{variable}: invalid value {:?}; the receiver exports over http/protobuf only",
            value.trim()
        ))
    }
}

/// The sampler `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG` name,
/// as the specification reads them (any case), parent-based always-on by
/// default. A ratio is a number from 0 to 1, 1 when not given; an
/// argument to a sampler that takes none is refused rather than ignored:
/// `OTEL_TRACES_SAMPLER_ARG=0.1` alone would still sample every trace.
pub(crate) fn sampler() -> Result<Sampler, String> {
    const DEFAULT: &str = "parentbased_always_on";
    let name = set(SAMPLER).map(|n| n.trim().to_ascii_lowercase());
    let arg = set(SAMPLER_ARG).map(|a| a.trim().to_owned());
    let ratio = || match &arg {
        None => Ok(1.0),
        Some(text) => text
            .parse::<f64>()
            .ok()
            .filter(|r| (0.0..=1.0).contains(r))
            .ok_or_else(|| {
                format!("{SAMPLER_ARG}: invalid value {text:?}; a ratio from 0 to 1, such as 0.25")
            }),
    };
    let alone = |sampler: Sampler| {
        match &arg {
        None => Ok(sampler),
        Some(_) => Err(format!(
            "{SAMPLER_ARG}: {SAMPLER}={}{} takes no argument; only traceidratio and parentbased_traceidratio read a ratio",
            name.as_deref().unwrap_or(DEFAULT),
            if name.is_none() { " (the default)" } else { "" },
        )),
    }
    };
    let parent_based = |sampler: Sampler| Sampler::ParentBased(Box::new(sampler));
    match name.as_deref().unwrap_or(DEFAULT) {
        "always_on" => alone(Sampler::AlwaysOn),
        "always_off" => alone(Sampler::AlwaysOff),
        "traceidratio" => Ok(Sampler::TraceIdRatioBased(ratio()?)),
        "parentbased_always_on" => alone(parent_based(Sampler::AlwaysOn)),
        "parentbased_always_off" => alone(parent_based(Sampler::AlwaysOff)),
        "parentbased_traceidratio" => Ok(parent_based(Sampler::TraceIdRatioBased(ratio()?))),
        other => Err(format!(
            "{SAMPLER}: invalid value {other:?}; possible values: always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::shown;

    #[test]
    fn an_endpoint_is_shown_without_its_credentials_query_or_fragment() {
        assert_eq!(
            shown("https://user:pw@collector.example:4318/v1/traces?api-key=k#f"),
            "https://<redacted>@collector.example:4318/v1/traces"
        );
        assert_eq!(
            shown("http://127.0.0.1:4318/v1/traces"),
            "http://127.0.0.1:4318/v1/traces"
        );
    }
}
