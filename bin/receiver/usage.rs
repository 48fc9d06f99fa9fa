//! A usage error as the receiver reports every configuration error: one
//! line, exit code 2, naming the environment variable a refused value
//! came from and the help to read.

use clap::CommandFactory;

use crate::exit::{config, Failed};
use crate::Cli;

/// Help and version go out as clap writes them; a usage error becomes one
/// line, exit code 2, like every other configuration error: clap's message
/// with its tips and accepted values, the environment variable named when
/// the value came from one, and the help to read.
pub(crate) fn usage_failure(e: clap::Error) -> Failed {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let help = format!("see `{} --help`", command_path(&argv));
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => e.exit(),
        ErrorKind::MissingRequiredArgument => {
            let missing = match e.get(ContextKind::InvalidArg) {
                Some(ContextValue::Strings(args)) => args.join(", "),
                _ => "an argument".to_owned(),
            };
            config(format!("missing required setting(s): {missing} ({help})"))
        }
        _ => {
            let mut message = clap_message(&e);
            if let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) {
                if let Some(variable) = from_environment(arg, &argv) {
                    message = format!(
                        "{variable}: {}",
                        message.replace(&format!(" for '{arg}'"), "")
                    );
                }
            }
            config(format!("{message} ({help})"))
        }
    }
}

/// clap's message on one line: its first line and the tips and accepted
/// values under it, without the usage and the "for more information" line
/// (the caller points to the help).
fn clap_message(e: &clap::Error) -> String {
    let rendered = e.to_string();
    rendered
        .lines()
        .map(str::trim)
        .take_while(|line| !line.starts_with("Usage:") && !line.starts_with("For more information"))
        .filter(|line| !line.is_empty())
        .map(|line| {
            let line = line.strip_prefix("error: ").unwrap_or(line);
            line.strip_prefix('[')
                .and_then(|l| l.strip_suffix(']'))
                .unwrap_or(line)
                .to_owned()
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The environment variable an argument's refused value came from: the
/// argument (`--source <SOURCE>`) reads one that is set, and its flag is
/// not on the command line.
fn from_environment(shown: &str, argv: &[String]) -> Option<String> {
    let long = shown.strip_prefix("--")?.split([' ', '=']).next()?;
    let flag = format!("--{long}");
    let on_line = argv
        .iter()
        .any(|a| a == &flag || a.starts_with(&format!("{flag}=")));
    if on_line {
        return None;
    }
    let mut command = Cli::command();
    command.build();
    let variable = find_env(&command, long)?;
    std::env::var_os(&variable).map(|_| variable)
}

/// The variable the argument `--long` reads, in `command` or any of its
/// subcommands.
fn find_env(command: &clap::Command, long: &str) -> Option<String> {
    command
        .get_arguments()
        .find(|a| a.get_long() == Some(long))
        .and_then(|a| a.get_env())
        .map(|v| v.to_string_lossy().into_owned())
        .or_else(|| command.get_subcommands().find_map(|c| find_env(c, long)))
}

/// `receiver` and the (sub)commands named on the command line, for the
/// help to point to: `receiver inspect event`.
fn command_path(argv: &[String]) -> String {
    let mut path = vec!["receiver".to_owned()];
    let mut command = Cli::command();
    for arg in argv.iter().filter(|a| !a.starts_with('-')) {
        let Some(sub) = command.find_subcommand(arg).cloned() else {
            break;
        };
        path.push(arg.clone());
        command = sub;
    }
    path.join(" ")
}
