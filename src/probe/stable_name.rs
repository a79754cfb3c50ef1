//! The stable-name probe: which branch the failover record currently hands out.
//!
//! One observation resolves the service's stable name and every branch endpoint afresh, with the
//! branches' resolver (uncached, see [`super::resolve`]), and matches the stable name's answer
//! against each branch's own answer: a shared address, or a CNAME in the stable name's chain that
//! names the branch endpoint or a name in its chain. With `end_to_end`, the round then runs the
//! service's probe through the stable name ([`end_to_end_probe`]). Evidence only: an observation
//! never feeds a branch's readiness.

use super::resolve::{Answer, Resolution, resolve_with};
use super::{Attempt, BranchProbe};
use crate::config::{AddressFamily, Role};
use crate::failure::FailureClass;
use crate::readiness::Millis;
use hickory_resolver::TokioResolver;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// `stable_name`: one round of the stable-name probe (evidence only: never feeds a branch's
/// readiness). `selected` is the branch whose own answer the stable name's matches (`None` when
/// none or several do, or the stable name did not resolve); `unknown_target` when the answer
/// matches no branch: the failover records point somewhere this config does not know.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StableNameRecord {
    /// The stable name asked.
    pub stable_name: String,
    /// Its answer chain, CNAMEs included, with TTLs as served (empty on failure).
    pub answers: Vec<Answer>,
    /// The branch selected, by name.
    pub selected: Option<String>,
    /// The answer matches no branch.
    pub unknown_target: bool,
    /// Branches whose answers all match (their endpoints share an address); empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ambiguous: Vec<String>,
    /// Why the stable name did not resolve (its DNS failure class), or
    /// `stable_name_unknown_target` when its answer matches no branch.
    pub class: Option<FailureClass>,
    /// The resolver's message on failure, or the answer chain no branch matches.
    pub error: Option<String>,
    /// Branch endpoints that did not resolve this round, with their class.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub branch_failures: BTreeMap<String, FailureClass>,
    /// The service's probe run through the stable name this round (`[stable_name_probe]
    /// end_to_end`); absent when not made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_to_end: Option<EndToEnd>,
}

/// An end-to-end attempt through the stable name: can a client use what DNS hands out?
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndToEnd {
    /// Start, ms since the epoch.
    pub started_at: Millis,
    /// End, ms since the epoch.
    pub finished_at: Millis,
    /// The address connected to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Success, or the failing step and class.
    #[serde(flatten)]
    pub outcome: super::Outcome,
}

/// A branch as the matcher sees it: its name, role and its endpoint's answer (if it resolved).
#[derive(Debug, Clone)]
pub struct BranchAnswer<'a> {
    /// Branch name.
    pub name: &'a str,
    /// Failover role.
    pub role: Role,
    /// The branch endpoint as configured.
    pub endpoint: &'a str,
    /// The endpoint's answer this round; `None` when it did not resolve.
    pub resolution: Option<&'a Resolution>,
}

/// Which branch the stable name's answer selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// Exactly one branch matches.
    Branch {
        /// Branch name.
        name: String,
        /// Its failover role.
        role: Role,
    },
    /// More than one branch matches (their answers overlap): no single selection.
    Ambiguous(Vec<String>),
    /// No branch matches: the failover records point somewhere this config does not know.
    Unknown,
}

impl Selection {
    /// The `SelectedBranch` datum: 1 = PRIMARY, 2 = SECONDARY, 0 = neither.
    pub fn datum(&self) -> f64 {
        match self {
            Self::Branch {
                role: Role::Primary,
                ..
            } => 1.0,
            Self::Branch {
                role: Role::Secondary,
                ..
            } => 2.0,
            Self::Ambiguous(_) | Self::Unknown => 0.0,
        }
    }

    /// The selected branch's name, if exactly one.
    pub fn branch_name(&self) -> Option<&str> {
        match self {
            Self::Branch { name, .. } => Some(name),
            _ => None,
        }
    }
}

/// A DNS name as compared: without the root dot, lower case.
fn norm(s: &str) -> String {
    s.trim().trim_end_matches('.').to_ascii_lowercase()
}

fn is_address(a: &Answer) -> bool {
    a.rtype == "A" || a.rtype == "AAAA"
}

/// Whether the stable name's answer chain `stable` leads to `branch` (pure).
fn matches(stable: &[Answer], branch: &BranchAnswer<'_>) -> bool {
    let mut names: BTreeSet<String> = BTreeSet::from([norm(branch.endpoint)]);
    let mut addrs: BTreeSet<&str> = BTreeSet::new();
    if let Some(res) = branch.resolution {
        for a in &res.answers {
            if a.rtype == "CNAME" {
                names.insert(norm(&a.data));
            } else if is_address(a) {
                addrs.insert(a.data.as_str());
            }
        }
    }
    stable.iter().any(|a| {
        (a.rtype == "CNAME" && names.contains(&norm(&a.data)))
            || (is_address(a) && addrs.contains(a.data.as_str()))
    })
}

/// Match the stable name's answer chain against every branch's answer (pure).
pub fn select(stable: &[Answer], branches: &[BranchAnswer<'_>]) -> Selection {
    let hits: Vec<&BranchAnswer<'_>> = branches.iter().filter(|b| matches(stable, b)).collect();
    match hits.as_slice() {
        [] => Selection::Unknown,
        [one] => Selection::Branch {
            name: one.name.to_string(),
            role: one.role,
        },
        many => Selection::Ambiguous(many.iter().map(|b| b.name.to_string()).collect()),
    }
}

/// What one round found.
#[derive(Debug, Clone)]
pub struct Observation {
    /// The stable name's answer chain with TTLs (empty when it did not resolve).
    pub answers: Vec<Answer>,
    /// The selection; `None` when the stable name did not resolve.
    pub selection: Option<Selection>,
    /// Why the stable name did not resolve: class and message.
    pub failure: Option<(FailureClass, String)>,
    /// Branch endpoints that did not resolve this round, with their class.
    pub branch_failures: Vec<(String, FailureClass)>,
}

impl Observation {
    /// The stable name answered with something no branch has.
    pub fn unknown_target(&self) -> bool {
        self.selection == Some(Selection::Unknown)
    }

    /// The `SelectedBranch` datum (0 when the stable name did not resolve).
    pub fn datum(&self) -> f64 {
        self.selection.as_ref().map_or(0.0, Selection::datum)
    }

    /// The evidence record of this round: an answer no branch has carries the class
    /// `stable_name_unknown_target`, a name that did not resolve its DNS class.
    pub fn record(&self, stable_name: &str) -> StableNameRecord {
        let (class, error) = match &self.failure {
            Some((c, m)) => (Some(*c), Some(m.clone())),
            None if self.unknown_target() => (
                Some(FailureClass::StableNameUnknownTarget),
                Some(format!(
                    "the answer matches no branch: {}",
                    chain_text(&self.answers)
                )),
            ),
            None => (None, None),
        };
        StableNameRecord {
            stable_name: stable_name.to_string(),
            answers: self.answers.clone(),
            selected: self
                .selection
                .as_ref()
                .and_then(|s| s.branch_name().map(str::to_string)),
            unknown_target: self.unknown_target(),
            ambiguous: match &self.selection {
                Some(Selection::Ambiguous(names)) => names.clone(),
                _ => Vec::new(),
            },
            class,
            error,
            branch_failures: self.branch_failures.iter().cloned().collect(),
            end_to_end: None,
        }
    }
}

/// A branch to resolve in a round: name, role, endpoint.
#[derive(Debug, Clone)]
pub struct BranchEndpoint {
    /// Branch name.
    pub name: String,
    /// Failover role.
    pub role: Role,
    /// Endpoint name.
    pub endpoint: String,
}

/// One round: resolve `stable_name` and every branch endpoint concurrently, then match. Logs the
/// loud WARN when the answer matches no branch.
pub async fn observe(
    resolver: &TokioResolver,
    family: AddressFamily,
    service: &str,
    stable_name: &str,
    branches: &[BranchEndpoint],
) -> Observation {
    let stable = resolve_with(resolver, stable_name, family);
    let ends = branches
        .iter()
        .map(|b| resolve_with(resolver, &b.endpoint, family));
    let (stable, ends) = tokio::join!(stable, join_all(ends));
    let mut branch_failures = Vec::new();
    let resolved: Vec<Option<Resolution>> = branches
        .iter()
        .zip(ends)
        .map(|(b, r)| match r {
            Ok(res) => Some(res),
            Err(e) => {
                branch_failures.push((b.name.clone(), e.class));
                None
            }
        })
        .collect();
    let stable = match stable {
        Ok(res) => res,
        Err(e) => {
            return Observation {
                answers: Vec::new(),
                selection: None,
                failure: Some((e.class, e.message)),
                branch_failures,
            };
        }
    };
    let views: Vec<BranchAnswer<'_>> = branches
        .iter()
        .zip(&resolved)
        .map(|(b, r)| BranchAnswer {
            name: &b.name,
            role: b.role,
            endpoint: &b.endpoint,
            resolution: r.as_ref(),
        })
        .collect();
    let selection = select(&stable.answers, &views);
    if selection == Selection::Unknown {
        tracing::warn!(
            service,
            stable_name,
            answer = %chain_text(&stable.answers),
            "the failover records point somewhere this config does not know: the stable name's answer matches no branch"
        );
    }
    Observation {
        answers: stable.answers,
        selection: Some(selection),
        failure: None,
        branch_failures,
    }
}

/// An answer chain as one line: `name TYPE data, …`.
fn chain_text(answers: &[Answer]) -> String {
    answers
        .iter()
        .map(|a| format!("{} {} {}", a.name, a.rtype, a.data))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The probe of the end-to-end attempt this round, among `probes` (the branches' own, made
/// [`BranchProbe::through_stable_name`]): the selected branch's, so the attempt uses the port
/// and settings of the branch the answer names; the PRIMARY's (else the first) when no single
/// branch is selected (pure).
pub fn end_to_end_probe<'a>(
    probes: &'a [BranchProbe],
    selection: Option<&Selection>,
) -> Option<&'a BranchProbe> {
    let selected = selection.and_then(Selection::branch_name);
    probes
        .iter()
        .find(|p| Some(p.branch.name.as_str()) == selected)
        .or_else(|| probes.iter().find(|p| p.branch.role == Role::Primary))
        .or_else(|| probes.first())
}

impl From<Attempt> for EndToEnd {
    fn from(a: Attempt) -> Self {
        EndToEnd {
            started_at: a.started_at,
            finished_at: a.finished_at,
            address: a.address,
            outcome: a.outcome,
        }
    }
}

/// Await every future concurrently, results in input order.
async fn join_all<F: std::future::Future>(futs: impl Iterator<Item = F>) -> Vec<F::Output> {
    // Awaiting one after another would serialise the lookups; poll them together.
    let mut pending: Vec<_> = futs.map(|f| Some(Box::pin(f))).collect();
    let mut results: Vec<Option<F::Output>> = (0..pending.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut done = true;
        for (i, slot) in pending.iter_mut().enumerate() {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        results[i] = Some(v);
                        *slot = None;
                    }
                    std::task::Poll::Pending => done = false,
                }
            }
        }
        if done {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    results.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests;
