//! What clonestage knows about the Bazel it works with: release numbers (`version`), the
//! settings it applies per release (`settings`), and how one word is written in an rc file;
//! shared by the launcher, `clonestage address --for-bazel` and the install.

pub mod settings;
mod version;

pub use version::Version;

/// One rc-file word: Bazel splits rc lines at whitespace and honours double quotes and
/// backslashes (`blaze_util::Tokenize`, called from `RcFile::ParseFile` in
/// `src/main/cpp/rc_file.cc`).
pub fn rc_word(word: &str) -> String {
    if word
        .chars()
        .any(|c| c.is_whitespace() || c == '"' || c == '\'' || c == '\\' || c == '#')
    {
        format!("\"{}\"", word.replace('\\', "\\\\").replace('"', "\\\""))
    } else {
        word.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rc_words_with_spaces_or_quotes_are_quoted() {
        assert_eq!(rc_word("/a/b"), "/a/b");
        assert_eq!(
            rc_word("/Users/x/Library/Application Support/c"),
            "\"/Users/x/Library/Application Support/c\""
        );
        assert_eq!(rc_word("a\"b"), "\"a\\\"b\"");
        assert_eq!(rc_word("/a#b"), "\"/a#b\"");
    }
}
