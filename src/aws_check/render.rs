//! The output of `check --aws`: a table, one line per finding, or one JSON document.

use super::model::{Failure, Finding};
use crate::config::escape_controls;
use serde::Serialize;

/// The JSON document.
#[derive(Serialize)]
struct Report<'a> {
    region: &'a str,
    violations: usize,
    warnings: usize,
    not_checked: usize,
    findings: &'a [Finding],
}

/// The JSON document of a check that checked nothing.
#[derive(Serialize)]
struct ErrorReport<'a> {
    region: &'a str,
    exit: u8,
    error: &'a Failure,
}

/// One JSON document with every finding.
pub fn json(region: &str, findings: &[Finding]) -> String {
    let (violations, warnings, not_checked) = counts(findings);
    let report = Report {
        region,
        violations,
        warnings,
        not_checked,
        findings,
    };
    to_json(&report)
}

/// Violations, warnings and `not_checked` rows.
fn counts(findings: &[Finding]) -> (usize, usize, usize) {
    let violations = findings.iter().filter(|f| f.is_violation()).count();
    let warnings = findings.iter().filter(|f| f.is_warning()).count();
    (violations, warnings, findings.len() - violations - warnings)
}

/// One JSON document with the error that ended the check: `region`, `exit` (the exit code) and
/// `error` (`kind`, `message`, `fix`).
pub fn error_json(region: &str, failure: &Failure) -> String {
    to_json(&ErrorReport {
        region,
        exit: failure.exit,
        error: failure,
    })
}

/// Pretty JSON whose strings carry no character that drives a terminal: serde_json escapes
/// C0 controls, and this also escapes DEL, the C1 controls (U+0080–U+009F, e.g. U+009B, a
/// one-byte CSI) and the bidirectional overrides and isolates (U+202E ...), as `\uXXXX`. They
/// can only occur inside strings, and every one is in the BMP, so the document stays valid and
/// decodes to the same names.
fn to_json<T: Serialize>(value: &T) -> String {
    // A struct of strings and numbers always serialises.
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    let mut out = String::with_capacity(text.len() + 1);
    for c in text.chars() {
        if is_terminal_control(c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out + "\n"
}

/// DEL, C1 controls, and bidirectional marks, embeddings, overrides and isolates.
fn is_terminal_control(c: char) -> bool {
    matches!(c, '\u{7f}'..='\u{9f}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// The table: a header, one line per finding (service, branch, object, rule, what is wrong, the
/// fix), and a summary line. Names from AWS are escaped so they cannot drive the terminal.
pub fn table(region: &str, findings: &[Finding]) -> String {
    let rows: Vec<[String; 6]> = findings
        .iter()
        .map(|f| {
            let rule: &str = f.rule.into();
            [
                f.service.clone(),
                f.branch.clone().unwrap_or_else(|| "-".into()),
                f.object.clone(),
                rule.to_string(),
                f.problem.clone(),
                format!("fix: {}", f.fix),
            ]
            .map(|c| escape_controls(&c).into_owned())
        })
        .collect();
    let header = ["SERVICE", "BRANCH", "OBJECT", "RULE", "PROBLEM", "FIX"].map(str::to_string);
    let mut width = [0usize; 4];
    for r in rows.iter().chain(std::iter::once(&header)) {
        for (w, c) in width.iter_mut().zip(r.iter()) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |r: &[String; 6]| {
        let mut s = String::new();
        for (w, c) in width.iter().zip(r.iter()) {
            s.push_str(&format!("{c:<w$}  "));
        }
        s.push_str(&format!("{}; {}", r[4], r[5]));
        s.trim_end().to_string() + "\n"
    };
    let mut out = String::new();
    if !rows.is_empty() {
        out.push_str(&line(&header));
        rows.iter().for_each(|r| out.push_str(&line(r)));
    }
    let (violations, warnings, not_checked) = counts(findings);
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    out.push_str(&format!(
        "check --aws (region {}): {violations} violation{}, {warnings} warning{}, {not_checked} not checked\n",
        escape_controls(region),
        plural(violations),
        plural(warnings),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws_check::model::Rule;

    fn finding(rule: Rule) -> Finding {
        Finding {
            service: "orders-db".into(),
            branch: Some("primary".into()),
            object: "alarm orders-db-primary\x1b[2J".into(),
            rule,
            problem: "period 300 s".into(),
            fix: "set Period = 60".into(),
        }
    }

    #[test]
    fn table_has_one_line_per_finding_and_escapes_names() {
        let t = table(
            "eu-west-1",
            &[finding(Rule::Period), finding(Rule::NotChecked)],
        );
        expect_test::expect![[r#"
            SERVICE    BRANCH   OBJECT                            RULE         PROBLEM; FIX
            orders-db  primary  alarm orders-db-primary\u{1b}[2J  period       period 300 s; fix: set Period = 60
            orders-db  primary  alarm orders-db-primary\u{1b}[2J  not_checked  period 300 s; fix: set Period = 60
            check --aws (region eu-west-1): 1 violation, 0 warnings, 1 not checked
        "#]]
        .assert_eq(&t);
    }

    #[test]
    fn json_counts_violations_apart_from_not_checked() {
        let j: serde_json::Value = serde_json::from_str(&json(
            "r",
            &[finding(Rule::Unit), finding(Rule::NotChecked)],
        ))
        .unwrap_or_default();
        assert_eq!(j["violations"], 1);
        assert_eq!(j["not_checked"], 1);
        assert_eq!(j["findings"][0]["rule"], "unit");
        assert_eq!(j["findings"][0]["branch"], "primary");
    }

    /// U+202E (right-to-left override) and U+009B (a one-byte CSI) in an alarm name: neither
    /// renderer writes them raw, and the JSON still decodes to the name.
    #[test]
    fn bidi_and_c1_controls_are_escaped_in_both_renderers() {
        let name = "alarm orders\u{202e}yramirp\u{9b}2J\u{7f}";
        let mut f = finding(Rule::Period);
        f.object = name.into();
        f.problem = format!("about {name}");
        for out in [
            table("r", std::slice::from_ref(&f)),
            json("r", &[f.clone()]),
        ] {
            assert!(
                !out.chars()
                    .any(|c| matches!(c, '\u{202e}' | '\u{9b}' | '\u{7f}')),
                "{out:?}"
            );
        }
        let j = json("r", &[f]);
        assert!(j.contains("\\u202e") && j.contains("\\u009b"), "{j}");
        let v: serde_json::Value = serde_json::from_str(&j).unwrap_or_default();
        assert_eq!(v["findings"][0]["object"], name);
    }

    #[test]
    fn an_error_is_a_json_document() {
        let f = Failure {
            exit: 74,
            kind: "unreachable",
            message: "cannot reach AWS: DescribeAlarms: \u{202e}".into(),
            fix: "check the network".into(),
        };
        let j = error_json("eu-west-1", &f);
        assert!(!j.contains('\u{202e}'), "{j}");
        let v: serde_json::Value = serde_json::from_str(&j).unwrap_or_default();
        assert_eq!(v["exit"], 74);
        assert_eq!(v["region"], "eu-west-1");
        assert_eq!(v["error"]["kind"], "unreachable");
        assert_eq!(v["error"]["fix"], "check the network");
    }
}
