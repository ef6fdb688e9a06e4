//! Messages as safe HTML: Markdown rendered on the server by pulldown-cmark,
//! then sanitised by ammonia's allowlist. The page sets only this `html`
//! (never the raw `body`) as markup, so no script, event handler, style or
//! `javascript:` link an agent writes ever reaches the DOM; remote images
//! are left to the content security policy, which loads none.

use std::sync::LazyLock;

static CLEANER: LazyLock<ammonia::Builder<'static>> = LazyLock::new(|| {
    let mut b = ammonia::Builder::default();
    b.url_schemes(["http", "https", "mailto"].into())
        .link_rel(Some("noopener noreferrer nofollow"))
        .add_allowed_classes("code", LANGUAGES);
    b
});

/// Code block languages kept as `language-NAME` classes (for styling).
const LANGUAGES: &[&str] = &[
    "language-rust",
    "language-sh",
    "language-bash",
    "language-json",
    "language-toml",
    "language-python",
    "language-js",
    "language-javascript",
    "language-ts",
    "language-diff",
    "language-text",
    "language-yaml",
];

/// `text` (Markdown) as HTML safe to put in the page.
pub fn to_html(text: &str) -> String {
    use pulldown_cmark::{Options, Parser, html};
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    let mut raw = String::with_capacity(text.len() * 3 / 2);
    html::push_html(&mut raw, Parser::new_ext(text, options));
    CLEANER.clean(&raw).to_string()
}

#[cfg(test)]
mod tests {
    use super::to_html;

    #[test]
    fn markdown_becomes_html() {
        let h = to_html("# Done\n\n- **one**\n- `two`\n\n```rust\nfn main() {}\n```\n");
        assert!(h.contains("<h1>Done</h1>"), "{h}");
        assert!(h.contains("<strong>one</strong>") && h.contains("<code>two</code>"), "{h}");
        assert!(h.contains("<pre><code class=\"language-rust\">fn main() {}"), "{h}");
    }

    #[test]
    fn nothing_active_survives() {
        for evil in [
            "<script>alert(1)</script>",
            "<img src=x onerror=alert(1)>",
            "[click](javascript:alert(1))",
            "<a href=\"javascript:alert(1)\">x</a>",
            "<iframe src=\"https://example.com\"></iframe>",
            "<div style=\"background:url(x)\" onclick=\"alert(1)\">x</div>",
            "<svg><script>alert(1)</script></svg>",
            "<form action=\"https://example.com\"><input></form>",
        ] {
            let h = to_html(evil).to_ascii_lowercase();
            for bad in ["<script", "onerror", "onclick", "javascript:", "<iframe", "style=", "<svg", "<form", "<input"]
            {
                assert!(!h.contains(bad), "{evil:?} left {bad:?}: {h}");
            }
        }
        let link = to_html("[site](https://example.com)");
        assert!(link.contains("rel=\"noopener noreferrer nofollow\""), "{link}");
    }
}
