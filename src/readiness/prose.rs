//! The readiness policy as prose, one line per rule: the one text `check` prints and the start
//! record carries (pure).

use super::Policy;
use crate::clock::fmt_duration as d;
use crate::failure::FailureClass;
use strum::IntoEnumIterator;

/// The policy's lines: `initial …, min_attempts …`, the unready condition, the definitive rule
/// (with its class lists, indented two spaces, when it is configured), the ready condition and
/// flap damping. `one_failure`: what one failed attempt does to the unready and to the ready
/// condition, appended to their lines after `; ` when given (it depends on the probe interval,
/// which the policy does not know).
pub fn policy_lines(p: &Policy, one_failure: Option<[String; 2]>) -> Vec<String> {
    let [unready_effect, ready_effect] =
        one_failure.map_or([None, None], |[u, r]| [Some(u), Some(r)]);
    let effect = |e: Option<String>| e.map(|e| format!("; {e}")).unwrap_or_default();
    let (u, r) = (&p.declare_unready, &p.declare_ready);
    let mut lines = vec![
        format!(
            "initial {}, min_attempts {}",
            p.initial.as_str(),
            p.min_attempts
        ),
        format!(
            "declare unready: success rate < {}% over {} held for {}{}",
            u.threshold_percent,
            d(u.window),
            d(u.for_),
            effect(unready_effect)
        ),
    ];
    lines.extend(definitive_lines(p));
    lines.push(format!(
        "declare ready:   success rate ≥ {}% over {} held for {}{}{}",
        r.threshold_percent,
        d(r.window),
        d(r.for_),
        if p.approval_required {
            ", then operator approval"
        } else {
            ""
        },
        effect(ready_effect)
    ));
    lines.push(damping_line(p));
    lines
}

/// Flap damping: when it lengthens the ready `for`, the first lengths and the cap.
fn damping_line(p: &Policy) -> String {
    let Some(damp) = p.damping.as_ref() else {
        return "flap damping: off".into();
    };
    let base = p.declare_ready.for_;
    let counts: Vec<u32> = (1..=3).map(|e| damp.flaps.saturating_add(e)).collect();
    let steps: Vec<String> = counts.iter().map(|n| d(damp.ready_for(base, *n))).collect();
    let counts: Vec<String> = counts.iter().map(u32::to_string).collect();
    format!(
        "flap damping: after more than {} ready → unready flaps within {}, declare ready holds for {} at {} flaps (not {}), doubling per flap up to {}; flaps are forgotten after {} without one",
        damp.flaps,
        d(damp.period),
        steps.join(", "),
        counts.join(", "),
        d(base),
        d(damp.max_for),
        d(damp.quiet)
    )
}

/// The definitive rule and the two class lists.
fn definitive_lines(p: &Policy) -> Vec<String> {
    let Some(def) = p.definitive.as_ref() else {
        return vec!["definitive rule: off".into()];
    };
    let names = |definitive: bool| {
        let v: Vec<&str> = FailureClass::iter()
            // A stable-name round's class is never a branch attempt's.
            .filter(|c| *c != FailureClass::StableNameUnknownTarget)
            .filter(|c| def.classes.contains(c) == definitive)
            .map(|c| c.as_str())
            .collect();
        if v.is_empty() {
            "(none)".to_string()
        } else {
            v.join(", ")
        }
    };
    let rule = if def.classes.is_empty() {
        "definitive rule: off (readiness.definitive_classes is empty)".to_string()
    } else {
        format!(
            "definitive rule: the unready condition also fires once the latest attempts (two or more) failed with a definitive class, without a break, for {} since the first",
            d(def.for_)
        )
    };
    vec![
        rule,
        format!("  definitive classes: {}", names(true)),
        format!("  ambiguous classes:  {}", names(false)),
    ]
}
