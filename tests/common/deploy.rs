//! The operator's kit in `deploy/` as the tests read it: the queries of the
//! alerting rules, the series of their promtool tests and the queries of
//! the dashboard, and what each names — metrics, labels, label values —
//! so that a test can hold them to what a receiver really exports.
//!
//! The rules are read line by line: they are written in a plain subset of
//! YAML (each `expr:` inline or a `|` block), and the count of what is read
//! is held to the count of rules, so that nothing is skipped unseen;
//! promtool reads them in full.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's `deploy/` folder.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

pub fn rules_file() -> PathBuf {
    dir().join("prometheus/receiver-rules.yml")
}

pub fn rules_tests_file() -> PathBuf {
    dir().join("prometheus/receiver-rules.test.yml")
}

pub fn dashboard_file() -> PathBuf {
    dir().join("grafana/receiver-dashboard.json")
}

pub fn unit_file() -> PathBuf {
    dir().join("systemd/receiver@.service")
}

/// One rule of the rules file.
#[derive(Debug, Clone)]
pub struct Rule {
    /// `alert` or `record`.
    pub kind: &'static str,
    /// The alert's or the recorded series' name.
    pub name: String,
    pub expr: String,
    /// The rule's other keys (`severity`, `summary`, `runbook_url`, …)
    /// with their values, as written on one line each.
    pub fields: Vec<(String, String)>,
}

impl Rule {
    pub fn field(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// A YAML scalar written on one line, without its quotes.
fn unquoted(value: &str) -> String {
    let v = value.trim();
    if v.len() >= 2
        && ((v.starts_with('"') && v.ends_with('"')) || (v.starts_with('\'') && v.ends_with('\'')))
    {
        v[1..v.len() - 1].to_owned()
    } else {
        v.to_owned()
    }
}

/// Every rule of the rules file, in order.
pub fn rules() -> Vec<Rule> {
    let text = std::fs::read_to_string(rules_file()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut rules: Vec<Rule> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        i += 1;
        if trimmed.starts_with('#') || trimmed.is_empty() {
            continue;
        }
        for kind in ["alert", "record"] {
            if let Some(name) = trimmed.strip_prefix(&format!("- {kind}:")) {
                rules.push(Rule {
                    kind,
                    name: unquoted(name),
                    expr: String::new(),
                    fields: Vec::new(),
                });
            }
        }
        let Some(rule) = rules.last_mut() else {
            continue;
        };
        if let Some(value) = trimmed.strip_prefix("expr:") {
            let value = value.trim();
            if value.starts_with('|') || value.starts_with('>') {
                let mut block = Vec::new();
                while i < lines.len()
                    && (lines[i].trim().is_empty() || indent(lines[i]) > indent(line))
                {
                    block.push(lines[i].trim());
                    i += 1;
                }
                rule.expr = block.join("\n");
            } else {
                rule.expr = unquoted(value);
            }
        } else if let Some((key, value)) = trimmed.split_once(':') {
            if !value.trim().is_empty() && !key.starts_with('-') {
                rule.fields.push((key.trim().to_owned(), unquoted(value)));
            }
        }
    }
    let declared = lines
        .iter()
        .filter(|l| {
            let t = l.trim_start();
            t.starts_with("- alert:") || t.starts_with("- record:")
        })
        .count();
    assert_eq!(rules.len(), declared, "a rule was not read");
    assert!(
        rules.iter().all(|r| !r.expr.is_empty()),
        "a rule without its expr was read: {rules:?}"
    );
    rules
}

/// The input series of the promtool tests, as written
/// (`name{label="value",…}`).
pub fn test_series() -> Vec<String> {
    let text = std::fs::read_to_string(rules_tests_file()).unwrap();
    let series: Vec<String> = text
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("- series:"))
        .map(unquoted)
        .collect();
    assert!(!series.is_empty(), "no series in the promtool tests");
    series
}

/// The dashboard as JSON.
pub fn dashboard() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dashboard_file()).unwrap())
        .expect("the dashboard is JSON")
}

/// Every query of the dashboard: its panels' and its variables', the
/// variables' `label_values(selector, label)` as `max by (label)
/// (selector)`, so that each is PromQL.
pub fn dashboard_queries() -> Vec<String> {
    let dashboard = dashboard();
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            queries.push(target["expr"].as_str().unwrap().to_owned());
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if variable["type"] != "query" {
            continue;
        }
        let query = variable["query"]["query"].as_str().unwrap();
        let inner = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .unwrap_or_else(|| panic!("a variable that is not label_values(…): {query}"));
        let (selector, label) = inner.rsplit_once(',').unwrap();
        queries.push(format!("max by ({}) ({})", label.trim(), selector.trim()));
    }
    queries
}

/// A dashboard query with Grafana's variables replaced by what they stand
/// for: PromQL as Prometheus receives it.
pub fn as_promql(query: &str) -> String {
    query
        .replace("$__rate_interval", "5m")
        .replace("$__interval", "1m")
        .replace("$__range", "1h")
        .replace("$receiver", ".*")
        .replace("$queue", ".*")
}

/// Runs promtool with `args` in `dir`; its output, and whether it
/// succeeded.
pub fn promtool(dir: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("promtool (Debian's package prometheus; make promtool installs it)");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// `promtool check rules` of the queries, as recording rules of a file of
/// their own.
pub fn check_queries(queries: &[String]) -> (bool, String) {
    let dir = std::env::temp_dir().join(format!("promql-{}", super::random_hex(4)));
    std::fs::create_dir_all(&dir).unwrap();
    let mut file = String::from("groups:\n  - name: queries\n    rules:\n");
    for (n, query) in queries.iter().enumerate() {
        file.push_str(&format!(
            "      - record: query_{n}\n        expr: {}\n",
            serde_json::to_string(&as_promql(query)).unwrap()
        ));
    }
    std::fs::write(dir.join("queries.yml"), file).unwrap();
    let checked = promtool(&dir, &["check", "rules", "queries.yml"]);
    let _ = std::fs::remove_dir_all(&dir);
    checked
}

/// A label matcher: label, operator, value.
pub type Matcher = (String, String, String);

/// What a query names.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Names {
    /// Each series selector: its metric name and its matchers.
    pub selectors: Vec<(String, Vec<Matcher>)>,
    /// The labels of `by`, `without`, `on`, `ignoring`, `group_left`,
    /// `group_right`.
    pub grouping: BTreeSet<String>,
}

const AGGREGATIONS: [&str; 12] = [
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
];
const GROUPING: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
const KEYWORDS: [&str; 8] = [
    "bool", "offset", "and", "or", "unless", "atan2", "inf", "nan",
];

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Str(String),
    Number,
    Punct(String),
}

fn tokens(query: &str) -> Vec<Token> {
    let chars: Vec<char> = query.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
        } else if c.is_ascii_digit() || c == '.' {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            out.push(Token::Number);
        } else if c == '"' || c == '\'' || c == '`' {
            let quote = c;
            let mut value = String::new();
            i += 1;
            while i < chars.len() && chars[i] != quote {
                if chars[i] == '\\' && quote != '`' {
                    i += 1;
                }
                value.push(chars[i]);
                i += 1;
            }
            i += 1;
            out.push(Token::Str(value));
        } else if "=!<>".contains(c) && chars.get(i + 1).is_some_and(|n| "=~".contains(*n)) {
            out.push(Token::Punct(chars[i..i + 2].iter().collect()));
            i += 2;
        } else {
            out.push(Token::Punct(c.to_string()));
            i += 1;
        }
    }
    out
}

/// The metrics, label matchers and grouping labels `query` names.
pub fn names(query: &str) -> Names {
    let tokens = tokens(query);
    let mut names = Names::default();
    let punct = |t: Option<&Token>, p: &str| matches!(t, Some(Token::Punct(x)) if x == p);
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            Token::Ident(word) if GROUPING.contains(&word.as_str()) => {
                i += 1;
                if punct(tokens.get(i), "(") {
                    i += 1;
                    while i < tokens.len() && !punct(tokens.get(i), ")") {
                        if let Token::Ident(label) = &tokens[i] {
                            names.grouping.insert(label.clone());
                        }
                        i += 1;
                    }
                }
            }
            Token::Ident(word)
                if AGGREGATIONS.contains(&word.as_str())
                    || KEYWORDS.contains(&word.as_str())
                    || punct(tokens.get(i + 1), "(") =>
            {
                i += 1;
            }
            Token::Ident(metric) => {
                let mut matchers = Vec::new();
                i += 1;
                if punct(tokens.get(i), "{") {
                    i += 1;
                    while i < tokens.len() && !punct(tokens.get(i), "}") {
                        if let (
                            Some(Token::Ident(label)),
                            Some(Token::Punct(op)),
                            Some(Token::Str(value)),
                        ) = (tokens.get(i), tokens.get(i + 1), tokens.get(i + 2))
                        {
                            matchers.push((label.clone(), op.clone(), value.clone()));
                            i += 3;
                        } else {
                            i += 1;
                        }
                    }
                }
                names.selectors.push((metric.clone(), matchers));
            }
            Token::Punct(p) if p == "[" => {
                while i < tokens.len() && !punct(tokens.get(i), "]") {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    names
}

/// A series as the promtool tests write it: its metric name and labels.
pub fn series_names(series: &str) -> (String, Vec<(String, String)>) {
    let names = names(series);
    let (metric, matchers) = names
        .selectors
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("not a series: {series}"));
    (
        metric,
        matchers.into_iter().map(|(l, _, v)| (l, v)).collect(),
    )
}

/// The headings of a Markdown document as GitHub anchors them: lower
/// case, punctuation other than `-` and `_` dropped, spaces as `-`.
pub fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut anchors = BTreeSet::new();
    for line in markdown.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        if fenced {
            continue;
        }
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#').trim();
        let anchor: String = heading
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        anchors.insert(anchor);
    }
    anchors
}
