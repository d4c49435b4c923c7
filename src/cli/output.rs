//! `-o table|json|yaml` for the commands people and scripts both read.
use clap::ValueEnum;
use serde::Serialize;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Lines for people.
    #[default]
    Table,
    /// One JSON document, for scripts.
    Json,
    /// The same document as YAML.
    Yaml,
}

/// The document in `format`: the table from `table`, else `value` serialized.
pub fn render<T: Serialize>(
    format: OutputFormat,
    value: &T,
    table: impl FnOnce(&T) -> String,
) -> anyhow::Result<String> {
    Ok(match format {
        OutputFormat::Table => table(value),
        OutputFormat::Json => serde_json::to_string_pretty(value)? + "\n",
        OutputFormat::Yaml => serde_saphyr::to_string(value)?,
    })
}

pub fn print<T: Serialize>(
    format: OutputFormat,
    value: &T,
    table: impl FnOnce(&T) -> String,
) -> anyhow::Result<()> {
    print!("{}", render(format, value, table)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Doc {
        name: String,
        count: u32,
    }

    #[test]
    fn each_format_renders_the_same_document() {
        let doc = Doc {
            name: "web".into(),
            count: 2,
        };
        let table = |d: &Doc| format!("{} {}\n", d.name, d.count);
        assert_eq!(render(OutputFormat::Table, &doc, table).unwrap(), "web 2\n");
        let json: serde_json::Value =
            serde_json::from_str(&render(OutputFormat::Json, &doc, table).unwrap()).unwrap();
        assert_eq!(json, serde_json::json!({"name": "web", "count": 2}));
        let yaml = render(OutputFormat::Yaml, &doc, table).unwrap();
        let back: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap();
        assert_eq!(back, json, "{yaml}");
    }
}
