//! The output of `check --aws`: a table, one line per finding, or one JSON document.

use super::model::Finding;
use crate::config::escape_controls;
use serde::Serialize;

/// The JSON document.
#[derive(Serialize)]
struct Report<'a> {
    region: &'a str,
    violations: usize,
    not_checked: usize,
    findings: &'a [Finding],
}

/// One JSON document with every finding.
pub fn json(region: &str, findings: &[Finding]) -> String {
    let violations = findings.iter().filter(|f| f.is_violation()).count();
    let report = Report {
        region,
        violations,
        not_checked: findings.len() - violations,
        findings,
    };
    // A struct of strings and numbers always serialises.
    serde_json::to_string_pretty(&report).unwrap_or_default() + "\n"
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
    let violations = findings.iter().filter(|f| f.is_violation()).count();
    let not_checked = findings.len() - violations;
    out.push_str(&format!(
        "check --aws (region {}): {violations} violation{}, {not_checked} not checked\n",
        escape_controls(region),
        if violations == 1 { "" } else { "s" },
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::aws_check::model::Rule;

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
            check --aws (region eu-west-1): 1 violation, 1 not checked
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
}
