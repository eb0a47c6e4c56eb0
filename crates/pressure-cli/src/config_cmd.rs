//! `pressure config schema|reference`: the config's JSON Schema and its
//! Markdown reference (`docs/config.md`), both generated from the config
//! types.

use std::io::Write;

/// Options of `pressure config`.
#[derive(Debug, clap::Args)]
pub(crate) struct ConfigArgs {
    #[command(subcommand)]
    action: ConfigAction,
}

#[derive(Debug, clap::Subcommand)]
enum ConfigAction {
    /// Prints the JSON Schema (draft 2020-12) of a config file.
    Schema,
    /// Prints the Markdown config reference (what `docs/config.md` holds).
    Reference,
}

pub(crate) fn run(args: ConfigArgs) -> anyhow::Result<()> {
    let text = match args.action {
        ConfigAction::Schema => serde_json::to_string_pretty(&pressure_gateway::config::schema::schema())?,
        ConfigAction::Reference => pressure_gateway::config::reference::markdown(),
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", text.trim_end())?;
    out.flush()?;
    Ok(())
}
