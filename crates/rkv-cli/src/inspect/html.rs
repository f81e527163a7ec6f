//! The HTML report of `rkv inspect`: one self-contained file, the page's CSS and script
//! inline and the record embedded as JSON, so it opens offline anywhere.
//!
//! Owns the assembly of the page from `report.html`, `report.css` and `report.js` (next
//! to this file) and the embedding of the data. What the page shows, and the DOM hooks
//! its test reads, are the script's (docs/inspect.md).
//! Must not know: how the record was made; it embeds the JSON of [`super::packed`].

use anyhow::{bail, Result};
use serde_json::Value;

const PAGE: &str = include_str!("report.html");
const STYLE: &str = include_str!("report.css");
const SCRIPT: &str = include_str!("report.js");

/// The record as text that can sit inside `<script type="application/json">`: every `<`
/// (only ever inside JSON strings) written as `\u003c`, so no `</script>` or `<!--` can
/// end or change the element.
fn embeddable(json: &Value) -> Result<String> {
    Ok(serde_json::to_string(json)?.replace('<', "\\u003c"))
}

/// The page for `json`.
pub fn render(json: &Value) -> Result<String> {
    let data = embeddable(json)?;
    let mut parts = PAGE.split("/*@");
    let mut out = String::with_capacity(PAGE.len() + STYLE.len() + SCRIPT.len() + data.len());
    out.push_str(parts.next().unwrap_or_default());
    for part in parts {
        let Some((name, rest)) = part.split_once("@*/") else {
            bail!("report.html: an unclosed placeholder");
        };
        out.push_str(match name {
            "STYLE" => STYLE,
            "SCRIPT" => SCRIPT,
            "DATA" => &data,
            _ => bail!("report.html: unknown placeholder {name}"),
        });
        out.push_str(rest);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn page_embeds_style_script_and_data_without_network() {
        let v = json!({"tokens": ["a", "</script><!--"], "policies": []});
        let page = render(&v).expect("render");
        assert!(page.contains("\\u003c/script>\\u003c!--"));
        assert_eq!(
            page.matches("</script>").count(),
            2,
            "the data and the script"
        );
        assert!(!page.contains("/*@"));
        for external in ["http://", "https://", "src=", "@import", "url("] {
            assert!(!page.contains(external), "{external}");
        }
        // The embedded text parses back to the same record.
        let start = page.find("id=\"rkv-data\">").expect("data") + "id=\"rkv-data\">".len();
        let end = start + page[start..].find("</script>").expect("end");
        let back: Value = serde_json::from_str(&page[start..end]).expect("json");
        assert_eq!(back, v);
    }
}
