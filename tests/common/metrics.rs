//! A receiver's `/metrics` as Prometheus reads it: a `receiver consume`
//! with its endpoint on a free port, and the page parsed by a real
//! Prometheus text parser.

use prometheus_parse::{Scrape, Value};
use result_inbox::ids::SubscriptionId;

use super::consume::Consume;
use super::orbit::{http, OrbitDev, QueueCredentials};
use super::TestDb;

/// Starts `receiver consume` with its metrics endpoint on a free port and
/// returns it with the endpoint's base URL, read from its log.
pub async fn consume_with_metrics(
    orbit: &OrbitDev,
    creds: &QueueCredentials,
    db: &TestDb,
    sub: &SubscriptionId,
    extra: &[(&str, &str)],
) -> (Consume, String) {
    let mut env = vec![("RECEIVER_METRICS_ADDR", "127.0.0.1:0")];
    env.extend_from_slice(extra);
    let consume = Consume::on_test_db(orbit, creds, db, sub, &env);
    let url = consume.metrics_url().await;
    (consume, url)
}

/// The endpoint's `/metrics`, parsed.
pub async fn scrape(url: &str) -> Scrape {
    let (status, body) = http("GET", &format!("{url}/metrics"), "", String::new()).await;
    assert_eq!(status, 200, "{body}");
    parse(&body)
}

/// A `/metrics` page, parsed.
pub fn parse(page: &str) -> Scrape {
    Scrape::parse(page.lines().map(|l| Ok(l.to_owned()))).expect("valid Prometheus text")
}

/// The value of the sample `name` whose labels include `labels`.
pub fn value(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name)
        .find(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            Value::Histogram(buckets) => buckets
                .iter()
                .find(|b| b.less_than.is_infinite())
                .map_or(0.0, |b| b.count),
            Value::Summary(_) => f64::NAN,
        })
}

/// Waits until `url`'s page has a sample of `name`, or panics with the
/// page after 20 s.
pub async fn scrape_once_it_has(url: &str, name: &str) -> Scrape {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let page = scrape(url).await;
        if page.samples.iter().any(|s| s.metric == name) {
            return page;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {name} in {:?}",
            page.samples.iter().map(|s| &s.metric).collect::<Vec<_>>()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
