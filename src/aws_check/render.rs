//! The output of `check --aws`: a table, one line per finding, or one JSON document.

use super::model::{Failure, Finding};
use crate::config::escape_controls;
use serde::Serialize;

/// One place the check read: a publish target's name and the region its reads went to.
#[derive(Debug, Clone, Serialize)]
pub struct Where {
    /// The target's name.
    pub name: String,
    /// Its region.
    pub region: String,
}

/// The region of the report's header: the one target's, or the first of several.
fn first_region(targets: &[Where]) -> &str {
    targets.first().map_or("", |t| t.region.as_str())
}

/// The JSON document.
#[derive(Serialize)]
struct Report<'a> {
    region: &'a str,
    targets: &'a [Where],
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

/// One JSON document with every finding: `region` (the first target's), `targets` (each
/// target's name and region), the counts, and the findings (with their `target` when there are
/// several).
pub fn json(targets: &[Where], findings: &[Finding]) -> String {
    let (violations, warnings, not_checked) = counts(findings);
    let report = Report {
        region: first_region(targets),
        targets,
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
/// fix; the object prefixed with its target when there are several), and a summary line. Names
/// from AWS are escaped so they cannot drive the terminal.
pub fn table(targets: &[Where], findings: &[Finding]) -> String {
    let rows: Vec<[String; 6]> = findings
        .iter()
        .map(|f| {
            let rule: &str = f.rule.into();
            let service = match &f.target {
                Some(t) => format!("{}@{t}", f.service),
                None => f.service.clone(),
            };
            [
                service,
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
    let place = match targets {
        [one] => format!("region {}", one.region),
        many => format!(
            "targets {}",
            many.iter()
                .map(|t| format!("{} in {}", t.name, t.region))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    out.push_str(&format!(
        "check --aws ({}): {violations} violation{}, {warnings} warning{}, {not_checked} not checked\n",
        escape_controls(&place),
        plural(violations),
        plural(warnings),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws_check::model::Rule;

    fn one(region: &str) -> Vec<Where> {
        vec![Where {
            name: region.into(),
            region: region.into(),
        }]
    }

    /// With several targets each row names its target, the summary names every target, and
    /// the JSON lists them; a warning is counted apart from violations.
    #[test]
    fn several_targets_are_reported_per_target() {
        let targets = vec![
            Where {
                name: "eu-west-1".into(),
                region: "eu-west-1".into(),
            },
            Where {
                name: "us-east-1@123456789012/pub".into(),
                region: "us-east-1".into(),
            },
        ];
        let mut a = finding(Rule::Period);
        a.target = Some("eu-west-1".into());
        let mut b = finding(Rule::AlarmInBranchRegion);
        b.target = Some("us-east-1@123456789012/pub".into());
        b.object = "health check hc-1".into();
        let t = table(&targets, &[a.clone(), b.clone()]);
        expect_test::expect![[r#"
            SERVICE                               BRANCH   OBJECT                            RULE                    PROBLEM; FIX
            orders-db@eu-west-1                   primary  alarm orders-db-primary\u{1b}[2J  period                  period 300 s; fix: set Period = 60
            orders-db@us-east-1@123456789012/pub  primary  health check hc-1                 alarm_in_branch_region  period 300 s; fix: set Period = 60
            check --aws (targets eu-west-1 in eu-west-1, us-east-1@123456789012/pub in us-east-1): 1 violation, 1 warning, 0 not checked
        "#]]
        .assert_eq(&t);
        let j: serde_json::Value =
            serde_json::from_str(&json(&targets, &[a, b])).unwrap_or_default();
        assert_eq!(j["region"], "eu-west-1");
        assert_eq!(j["targets"][1]["region"], "us-east-1");
        assert_eq!(
            (j["violations"].clone(), j["warnings"].clone()),
            (1.into(), 1.into())
        );
        assert_eq!(j["findings"][1]["target"], "us-east-1@123456789012/pub");
        assert_eq!(j["findings"][1]["rule"], "alarm_in_branch_region");
    }

    fn finding(rule: Rule) -> Finding {
        Finding {
            target: None,
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
            &one("eu-west-1"),
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
            &one("r"),
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
            table(&one("r"), std::slice::from_ref(&f)),
            json(&one("r"), &[f.clone()]),
        ] {
            assert!(
                !out.chars()
                    .any(|c| matches!(c, '\u{202e}' | '\u{9b}' | '\u{7f}')),
                "{out:?}"
            );
        }
        let j = json(&one("r"), &[f]);
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
