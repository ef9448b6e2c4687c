//! The options a message names, in each front end's own words. Library messages write an
//! option as `⟨name⟩` (one that takes a value) or `⟨name!⟩` (a switch); the command line says
//! `--name`, Python `name=` and `name=True` (its keyword, `-` read as `_`). A build with a cargo
//! feature is `⟨+feature⟩`, said in the words of the front end that runs ([`set_build_words`]:
//! how the command is built is not how the package is). Nothing else in a message changes.

/// Reads a request's field from the text the command line writes it as (`--split test`,
/// `--arch resnet18`), with that parser's message (for `#[serde(deserialize_with)]`).
pub fn from_text<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    let s = <String as serde::Deserialize>::deserialize(d)?;
    s.parse()
        .map_err(|e: T::Err| serde::de::Error::custom(format!("{e:#}")))
}

/// `true`: the default of a request's switch that is on unless turned off (`progress`).
pub fn yes() -> bool {
    true
}

/// Whether a switch that is on by default is on (left out of what a record writes, so that a
/// record of a run without it is as before).
pub fn is_yes(b: &bool) -> bool {
    *b
}

/// `message` (an error read inside the table or field `keys`) with `keys` in front: joined to
/// the key path the message starts with (`eps: …` in `defense` is `defense.eps: …`).
pub fn in_keys(keys: &str, message: &str) -> String {
    let named = |k: &str| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || "_-.[]".contains(c));
    match message.split_once(": ") {
        Some((k, _)) if named(k) => format!("{keys}.{message}"),
        _ => format!("{keys}: {message}"),
    }
}

/// A serde message in rdml's words: the phrases serde's derive writes (`missing field`,
/// `unknown field`, `invalid type`, `unknown variant`) said as what the user wrote wrong.
pub fn plain_serde(msg: &str) -> String {
    let unquote = |s: &str| s.replace('`', "");
    msg.lines()
        .map(|line| {
            if let Some((head, rest)) = line.split_once("missing field `") {
                let name = rest.split('`').next().unwrap_or_default();
                format!("{head}the key {name} is required here and missing")
            } else if let Some((head, rest)) = line.split_once("unknown field `") {
                let (name, expected) = rest.split_once('`').unwrap_or((rest, ""));
                let keys = expected
                    .trim_start_matches(", expected one of ")
                    .trim_start_matches(", expected ");
                match keys {
                    ", there are no fields" => format!("{head}{name} is not a key here (this table takes none)"),
                    _ => format!("{head}{name} is not a key here (the keys: {})", unquote(keys)),
                }
            } else if let Some((head, rest)) = line.split_once("unknown variant `") {
                let (name, expected) = rest.split_once('`').unwrap_or((rest, ""));
                let names = expected
                    .trim_start_matches(", expected one of ")
                    .trim_start_matches(", expected ");
                format!("{head}{name} is not one of {}", unquote(names))
            } else if let Some((head, rest)) = line.split_once("invalid type: ") {
                let (found, expected) = rest.split_once(", expected ").unwrap_or((rest, "another kind"));
                format!("{head}a value of the wrong kind ({found}, where {expected} was expected)")
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// How a front end names an option.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Words {
    /// `--name`.
    #[default]
    CommandLine,
    /// `name=` (`name=True` for a switch).
    Python,
    /// `name` alone: a page that both front ends' users read (the report).
    Plain,
}

/// How this process's front end says a build with a cargo feature, set once at its start.
static BUILD_WORDS: std::sync::OnceLock<fn(&str) -> String> = std::sync::OnceLock::new();

/// The front end's own words for a build with `feature` (the first call sets them); without
/// them, and on a page both front ends' users read, "a build with the cuda feature".
pub fn set_build_words(words: fn(&str) -> String) {
    let _ = BUILD_WORDS.set(words);
}

fn build_words(feature: &str, words: Words) -> String {
    match (words, BUILD_WORDS.get()) {
        (Words::CommandLine | Words::Python, Some(say)) => say(feature),
        _ => format!("a build with the {feature} feature"),
    }
}

/// `msg` with every `⟨…⟩` rendered in `words`; a `⟨` without its `⟩` is left as it is.
pub fn render(msg: &str, words: Words) -> String {
    let mut out = String::with_capacity(msg.len());
    let mut rest = msg;
    while let Some(i) = rest.find('⟨') {
        let after = &rest[i + '⟨'.len_utf8()..];
        let Some(j) = after.find('⟩') else { break };
        let token = &after[..j];
        if let Some(feature) = token
            .strip_prefix('+')
            .filter(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_lowercase()))
        {
            out.push_str(&rest[..i]);
            out.push_str(&build_words(feature, words));
            rest = &after[j + '⟩'.len_utf8()..];
            continue;
        }
        let (name, switch) = match token.strip_suffix('!') {
            Some(n) => (n, true),
            None => (token, false),
        };
        let option = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if !option {
            // Not a token (a `⟨` in a path, say): kept as it is, and the scan goes on after it.
            let keep = i + '⟨'.len_utf8();
            out.push_str(&rest[..keep]);
            rest = &rest[keep..];
            continue;
        }
        out.push_str(&rest[..i]);
        match words {
            Words::CommandLine => {
                out.push_str("--");
                out.push_str(&name.replace('_', "-"));
            }
            Words::Python => {
                out.push_str(&name.replace('-', "_"));
                out.push_str(if switch { "=True" } else { "=" });
            }
            Words::Plain => out.push_str(&name.replace('-', "_")),
        }
        rest = &after[j + '⟩'.len_utf8()..];
        // A value after the option (`⟨eps⟩ 2`) is the keyword's own in Python: `eps=2`.
        if words == Words::Python
            && !switch
            && rest
                .strip_prefix(' ')
                .and_then(|r| r.chars().next())
                .is_some_and(|c| c.is_ascii_digit() || "-.\"'[".contains(c))
        {
            rest = &rest[1..];
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// serde's phrases said as what the user wrote wrong (issue 52: no serde words in messages).
    #[test]
    fn serde_phrases_in_rdmls_words() {
        assert_eq!(
            plain_serde("missing field `dataset`"),
            "the key dataset is required here and missing"
        );
        assert_eq!(
            plain_serde("unknown field `x`, there are no fields"),
            "x is not a key here (this table takes none)"
        );
        assert_eq!(
            plain_serde("unknown field `margn`, expected one of `distance`, `margin`"),
            "margn is not a key here (the keys: distance, margin)"
        );
        assert_eq!(
            plain_serde("unknown variant `l3`, expected `linf` or `l2`"),
            "l3 is not one of linf or l2"
        );
        assert_eq!(
            plain_serde("at line 2: invalid type: string \"x\", expected usize"),
            "at line 2: a value of the wrong kind (string \"x\", where usize was expected)"
        );
    }

    /// Python's words here; the command line's are tested with the command (`src/cli`).
    #[test]
    fn each_front_end_names_options_in_its_own_words() {
        let message = "pass ⟨resume!⟩ to continue it (with more ⟨epochs⟩), or choose another ⟨out⟩; ⟨embedding_dim⟩ 64";
        assert_eq!(
            render(message, Words::Python),
            "pass resume=True to continue it (with more epochs=), or choose another out=; embedding_dim=64"
        );
        assert_eq!(
            render(message, Words::Plain),
            "pass resume to continue it (with more epochs), or choose another out; embedding_dim 64"
        );
        set_build_words(|f| format!("<the front end's build with {f}>"));
        let message = "no CUDA: build it with ⟨+cuda⟩";
        assert_eq!(
            render(message, Words::Python),
            "no CUDA: build it with <the front end's build with cuda>"
        );
        assert_eq!(
            render(message, Words::Plain),
            "no CUDA: build it with a build with the cuda feature"
        );
        assert_eq!(render("a ⟨ alone", Words::Python), "a ⟨ alone");
        // A `⟨` of the user's (a path) is not a token; the token after it still is.
        assert_eq!(
            render("out⟨old.json exists; pass ⟨overwrite!⟩", Words::Python),
            "out⟨old.json exists; pass overwrite=True"
        );
    }
}
