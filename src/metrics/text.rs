//! Prometheus text exposition format (version 0.0.4) for the scrape-time families.
//!
//! ```text
//!  # HELP sluice_partition_high_watermark Offset below which ...
//!  # TYPE sluice_partition_high_watermark gauge
//!  sluice_partition_high_watermark{topic="orders",partition="0"} 1234
//! ```
//! Samples are gathered per family and written family by family, so a family's lines are always
//! contiguous (the format requires it) whatever order the collector visits state in.
//!
//! # Invariants
//! - Every family written is in the catalogue; its HELP and TYPE come from there.
//! - Label values are escaped (`\\`, `\"`, `\n`), so a group name cannot break the format.

use std::fmt::Write;

use indexmap::IndexMap;

use super::catalogue;

/// Samples of the scrape-time families, in first-seen order.
#[derive(Default)]
pub struct Exposition {
    families: IndexMap<&'static str, String>,
}

impl Exposition {
    /// Adds one sample of family `name`.
    ///
    /// # Panics
    /// If `name` is not in the catalogue or `labels` are not the family's labels (both are
    /// literals in the collector; the tests render every family).
    pub fn sample(&mut self, name: &'static str, labels: &[(&str, &str)], value: f64) {
        let def = catalogue::def(name);
        debug_assert!(
            def.labels.len() == labels.len() && def.labels.iter().zip(labels).all(|(a, (b, _))| a == b),
            "{name}: labels {labels:?} do not match the catalogue {:?}",
            def.labels
        );
        let line = self.families.entry(name).or_default();
        line.push_str(name);
        if !labels.is_empty() {
            line.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    line.push(',');
                }
                line.push_str(k);
                line.push_str("=\"");
                escape_label_value(line, v);
                line.push('"');
            }
            line.push('}');
        }
        line.push(' ');
        write_value(line, value);
        line.push('\n');
    }

    /// Writes every family with its HELP and TYPE lines.
    pub fn write_to(&self, out: &mut String) {
        for (name, lines) in &self.families {
            let def = catalogue::def(name);
            let _ = writeln!(out, "# HELP {name} {}", escape_help(def.help));
            let _ = writeln!(out, "# TYPE {name} {}", def.kind.as_str());
            out.push_str(lines);
        }
    }

    /// Names of the families that have at least one sample.
    pub fn family_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.families.keys().copied()
    }
}

fn escape_label_value(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn escape_help(h: &str) -> String {
    h.replace('\\', "\\\\").replace('\n', "\\n")
}

fn write_value(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else if v.fract() == 0.0 && v.abs() < 9.0e15 {
        let _ = write!(out, "{}", v as i64);
    } else {
        let _ = write!(out, "{v}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_contiguous_and_labels_escaped() {
        let mut e = Exposition::default();
        e.sample("sluice_consumer_group_members", &[("group", "a\"b\\c\nd")], 3.0);
        e.sample("sluice_partitions", &[], 2.0);
        e.sample("sluice_consumer_group_members", &[("group", "g2")], 0.5);
        let mut out = String::new();
        e.write_to(&mut out);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0].split(' ').take(2).collect::<Vec<_>>(), ["#", "HELP"]);
        assert_eq!(lines[1], "# TYPE sluice_consumer_group_members gauge");
        assert_eq!(lines[2], r#"sluice_consumer_group_members{group="a\"b\\c\nd"} 3"#);
        assert_eq!(lines[3], r#"sluice_consumer_group_members{group="g2"} 0.5"#);
        assert_eq!(lines[5], "# TYPE sluice_partitions gauge");
        assert_eq!(lines[6], "sluice_partitions 2");
    }
}
