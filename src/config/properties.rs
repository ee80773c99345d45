//! A reader for Java `.properties` files, enough for Kafka's `server.properties`:
//! `key=value`, `key: value` or `key value`; `#` and `!` comment lines; a trailing backslash
//! continues a line; surrounding whitespace is trimmed. Unicode escapes are not interpreted
//! (Kafka configs do not use them).

/// Parses properties text into `(key, value)` pairs in file order.
pub fn parse_properties(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if pending.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('!')) {
            continue;
        }
        if let Some(body) = trimmed.strip_suffix('\\') {
            pending.push_str(body);
            continue;
        }
        pending.push_str(trimmed);
        let logical = std::mem::take(&mut pending);
        if let Some(pair) = split_pair(&logical) {
            out.push(pair);
        }
    }
    if !pending.is_empty() {
        if let Some(pair) = split_pair(&pending) {
            out.push(pair);
        }
    }
    out
}

fn split_pair(line: &str) -> Option<(String, String)> {
    let line = line.trim();
    if line.is_empty() {
        return None;
    }
    let idx = line.find(['=', ':', ' ', '\t']);
    let (k, v) = match idx {
        Some(i) => {
            let (k, rest) = line.split_at(i);
            let rest = rest.trim_start();
            let rest = rest.strip_prefix(['=', ':']).unwrap_or(rest);
            (k, rest.trim())
        }
        None => (line, ""),
    };
    Some((k.trim().to_string(), v.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kafka_style_server_properties() {
        let text = "# comment\n! other\nnode.id=1\nlisteners = PLAINTEXT://:9092\nlog.dirs: /tmp/a,\\\n   /tmp/b\nempty=\n";
        let p = parse_properties(text);
        assert_eq!(
            p,
            vec![
                ("node.id".into(), "1".into()),
                ("listeners".into(), "PLAINTEXT://:9092".into()),
                ("log.dirs".into(), "/tmp/a,/tmp/b".into()),
                ("empty".into(), "".into()),
            ]
        );
    }
}
