//! How a config's mistakes are said: a toml error of the config after its overrides as one line
//! with its table first, and an error inside a `kind` table at its key's own line.

/// A toml error of a value read without its text (the config after the overrides) as one line,
/// its table first (`loss: unknown field …`), where toml's own words end in a line "in `loss`".
pub(super) fn keyed(e: &toml::de::Error, overrides: &[String]) -> String {
    let shown = e.to_string();
    let shown = shown.trim_end();
    let keys = match shown.rsplit_once("\nin `") {
        Some((_, keys)) if e.span().is_none() => keys.trim_end_matches('`'),
        _ => return shown.to_string(),
    };
    let message = e.message().trim_end();
    if message.starts_with(&format!("{keys}.")) {
        return message.to_string();
    }
    format!(
        "{}{}",
        crate::field::in_keys(keys, message),
        kind_hint(keys, message, overrides)
    )
}

/// An error of a key inside a `kind` table (`[defense]`, `[loss]`: `eps: a value of the wrong
/// kind`), which toml places at the table's header, placed at the key's own line as toml says an
/// error, when the table holds the key on a line of its own.
pub(super) fn at_key(text: &str, e: &toml::de::Error) -> Option<String> {
    let span = e.span()?;
    let message = e.message().trim_end();
    let key = message.split_once(": ")?.0.split('.').next()?;
    let plain = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if key.is_empty() || !key.chars().all(plain) || !text.get(span.clone())?.trim_start().starts_with('[') {
        return None;
    }
    // The span is the table's (its header, and toml may take its keys in too): the lines after
    // the header's, up to the next table.
    let header_end = span.start + text.get(span.start..)?.find('\n')? + 1;
    let mut offset = header_end;
    for line in text.get(header_end..)?.split_inclusive('\n') {
        let body = line.trim_start();
        if body.starts_with('[') {
            break;
        }
        if let Some((k, v)) = body.split_once('=')
            && k.trim().trim_matches('"') == key
        {
            let value = offset + (line.len() - v.trim_start().len());
            let number = text[..value].matches('\n').count() + 1;
            let column = value - text[..value].rfind('\n').map_or(0, |i| i + 1) + 1;
            let shown = line.trim_end();
            let width = v.trim().chars().count().max(1);
            let gutter = " ".repeat(number.to_string().len());
            return Some(format!(
                "TOML parse error at line {number}, column {column}\n{gutter} |\n{number} | {shown}\n{gutter} | {}{}\n{message}\n",
                " ".repeat(column - 1),
                "^".repeat(width)
            ));
        }
        offset += line.len();
    }
    None
}

/// A key the table `keys` does not know, after an override changed only its kind, is one of
/// the old kind's: said so, with the form that replaces the whole table.
fn kind_hint(keys: &str, message: &str, overrides: &[String]) -> String {
    let kind_only = overrides
        .iter()
        .any(|o| o.replace(' ', "").starts_with(&format!("{keys}.kind=")));
    if !(kind_only && message.starts_with("unknown field")) {
        return String::new();
    }
    format!(
        " (⟨set⟩ {keys}.kind=… changes the kind and keeps the table's other keys, which belong to the kind \
         before; give the whole table instead: ⟨set⟩ {keys}={{kind=…, …}})"
    )
}
