//! The `resolve` step: a fresh lookup of the branch-specific endpoint name on every attempt.
//!
//! Caching is off (`cache_size = 0`), the hosts file is never consulted, and names are absolute
//! (no search-list expansion), so each attempt sees what the authoritative data says now.

use crate::config::{AddressFamily, Dns};
use crate::failure::{FailureClass, Step};
use hickory_resolver::TokioResolver;
use hickory_resolver::config::{NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::{DnsError, NetError};
use hickory_resolver::proto::op::ResponseCode;
use hickory_resolver::proto::rr::{Name, RData, RecordType};
use serde::Serialize;
use std::net::IpAddr;
use std::str::FromStr;

pub use super::attempt::Answer;
use super::attempt::DnsMeta;
use super::ctx::{StepCtx, StepError, StepFailure};

/// What the resolve step found.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Resolution {
    /// Full answer chain, CNAMEs included.
    pub answers: Vec<Answer>,
    /// Addresses to connect to, in answer order.
    pub addresses: Vec<IpAddr>,
    /// Response code of the answer that was used (e.g. `NoError`).
    pub rcode: String,
    /// Whether that answer was authoritative.
    pub authoritative: bool,
}

/// Why a resolver could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ResolverSetupError {
    /// resolv.conf could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// resolv.conf has no usable nameserver line.
    #[error("{path} lists no nameserver; set dns.nameservers in the config")]
    NoNameserver {
        /// The file.
        path: String,
    },
    /// resolv.conf could not be parsed.
    #[error("cannot parse {path}: {reason}")]
    Parse {
        /// The file.
        path: String,
        /// Parser message.
        reason: String,
    },
}

/// The `resolve` step: look up the branch's endpoint name; the answer chain goes into the attempt.
///
/// # Errors
/// The lookup's class (see [`classify_dns`]), or `dns_stable_name` when the answer chain passes
/// through the service's stable name (except in the end-to-end attempt, which resolves it).
pub async fn run(ctx: &mut StepCtx<'_>) -> Result<Resolution, StepFailure> {
    let probe = ctx.probe;
    let endpoint = probe.branch.endpoint.as_str();
    let res = ctx
        .steps
        .run(
            Step::Resolve,
            resolve_with(ctx.resolver, endpoint, probe.address_family),
        )
        .await?;
    ctx.learned.answers = res.answers.clone();
    ctx.learned.dns = Some(DnsMeta {
        rcode: res.rcode.clone(),
        authoritative: res.authoritative,
    });
    // The end-to-end attempt resolves the stable name on purpose; a branch's attempt never may.
    if let Some(a) = through_stable_name(&res.answers, &probe.stable_name)
        && !probe.end_to_end
    {
        let message = format!(
            "{endpoint} resolves through the stable name {} ({} {} {}): a branch probe must not follow the failover record",
            probe.stable_name, a.name, a.rtype, a.data
        );
        return Err(ctx
            .steps
            .fail_last(Step::Resolve, FailureClass::DnsStableName, message));
    }
    Ok(res)
}

/// The record of `answers` that is, or points at, `stable_name` (pure).
fn through_stable_name<'a>(answers: &'a [Answer], stable_name: &str) -> Option<&'a Answer> {
    let is_stable = |s: &str| s.trim_end_matches('.').eq_ignore_ascii_case(stable_name);
    answers
        .iter()
        .find(|a| is_stable(&a.name) || (a.rtype == "CNAME" && is_stable(&a.data)))
}

/// Build the uncached resolver from the `[dns]` settings.
///
/// # Errors
/// [`ResolverSetupError`] when resolv.conf is needed and is missing, unparsable or lists no
/// nameserver.
pub fn build_resolver(dns: &Dns) -> Result<TokioResolver, ResolverSetupError> {
    let resolv_conf = match &dns.nameservers {
        Some(_) => Vec::new(),
        None => std::fs::read(&dns.resolv_conf).map_err(|source| ResolverSetupError::Read {
            path: dns.resolv_conf.display().to_string(),
            source,
        })?,
    };
    build_resolver_from(dns, resolv_conf)
}

/// [`build_resolver`] with resolv.conf's contents already read by the caller (ignored when
/// `dns.nameservers` is set).
///
/// # Errors
/// As [`build_resolver`], except reading.
pub fn build_resolver_from(
    dns: &Dns,
    resolv_conf: Vec<u8>,
) -> Result<TokioResolver, ResolverSetupError> {
    let servers: Vec<NameServerConfig> = match &dns.nameservers {
        Some(list) => list
            .iter()
            .map(|a| {
                let mut ns = NameServerConfig::udp_and_tcp(a.ip());
                for c in &mut ns.connections {
                    c.port = a.port();
                }
                ns
            })
            .collect(),
        None => {
            let path = dns.resolv_conf.display().to_string();
            let (conf, _opts) = hickory_resolver::system_conf::parse_resolv_conf(resolv_conf)
                .map_err(|e| ResolverSetupError::Parse {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
            let (_, _, servers) = conf.into_parts();
            servers
        }
    };
    if servers.is_empty() {
        return Err(ResolverSetupError::NoNameserver {
            path: dns.resolv_conf.display().to_string(),
        });
    }
    let mut opts = ResolverOpts::default();
    opts.cache_size = 0;
    opts.use_hosts_file = ResolveHosts::Never;
    opts.timeout = dns.timeout;
    // hickory's `attempts` counts retries after the first query: 0 is one query per lookup.
    opts.attempts = 0;
    opts.ndots = 0;
    opts.preserve_intermediates = true;
    // Ask two nameservers at once when there are two or more, so a dead one never makes an
    // attempt wait out its timeout; with a single nameserver, one query at a time.
    opts.num_concurrent_reqs = servers.len().min(2);
    let config = ResolverConfig::from_parts(None, vec![], servers);
    let mut builder = TokioResolver::builder_with_config(config, TokioRuntimeProvider::default());
    *builder.options_mut() = opts;
    builder.build().map_err(|e| ResolverSetupError::Parse {
        path: "(resolver)".into(),
        reason: e.to_string(),
    })
}

/// Resolve `endpoint` (absolute) with the default preference: A first, AAAA when the name has
/// no A record.
///
/// # Errors
/// A [`StepError`] with a DNS failure class; see [`classify_dns`].
pub async fn resolve(resolver: &TokioResolver, endpoint: &str) -> Result<Resolution, StepError> {
    resolve_with(resolver, endpoint, AddressFamily::Ipv4ThenIpv6).await
}

/// Resolve `endpoint` (absolute) with an address-family preference.
///
/// # Errors
/// A [`StepError`] with a DNS failure class; see [`classify_dns`].
pub async fn resolve_with(
    resolver: &TokioResolver,
    endpoint: &str,
    family: AddressFamily,
) -> Result<Resolution, StepError> {
    let mut name = Name::from_str(endpoint).map_err(|e| StepError {
        class: FailureClass::DnsError,
        message: format!("invalid name {endpoint:?}: {e}"),
    })?;
    name.set_fqdn(true);
    let (first, fallback) = match family {
        AddressFamily::Ipv4ThenIpv6 => (RecordType::A, Some(RecordType::AAAA)),
        AddressFamily::Ipv6ThenIpv4 => (RecordType::AAAA, Some(RecordType::A)),
        AddressFamily::Ipv4 => (RecordType::A, None),
        AddressFamily::Ipv6 => (RecordType::AAAA, None),
    };
    let lookup = match (resolver.lookup(name.clone(), first).await, fallback) {
        (Ok(l), _) => l,
        (Err(e), Some(second)) if classify_dns(&e) == FailureClass::DnsNodata => {
            resolver.lookup(name, second).await.map_err(to_step_error)?
        }
        (Err(e), _) => return Err(to_step_error(e)),
    };
    let mut out = Resolution {
        rcode: format!("{:?}", lookup.message().metadata.response_code),
        authoritative: lookup.message().metadata.authoritative,
        ..Default::default()
    };
    for r in lookup.answers() {
        let (rtype, data) = match &r.data {
            RData::A(a) => {
                out.addresses.push(IpAddr::V4(a.0));
                ("A", a.0.to_string())
            }
            RData::AAAA(a) => {
                out.addresses.push(IpAddr::V6(a.0));
                ("AAAA", a.0.to_string())
            }
            RData::CNAME(c) => ("CNAME", c.0.to_string()),
            other => {
                out.answers.push(Answer {
                    name: r.name.to_string(),
                    rtype: other.record_type().to_string(),
                    data: other.to_string(),
                    ttl: r.ttl,
                });
                continue;
            }
        };
        out.answers.push(Answer {
            name: r.name.to_string(),
            rtype: rtype.to_string(),
            data,
            ttl: r.ttl,
        });
    }
    if out.addresses.is_empty() {
        return Err(StepError {
            class: FailureClass::DnsNodata,
            message: format!("{endpoint} has no A or AAAA record"),
        });
    }
    Ok(out)
}

fn to_step_error(e: NetError) -> StepError {
    StepError {
        class: classify_dns(&e),
        message: e.to_string(),
    }
}

/// Map a hickory error to a failure class. The one place DNS errors are classified.
pub fn classify_dns(e: &NetError) -> FailureClass {
    match e {
        NetError::Dns(DnsError::NoRecordsFound(nr)) => {
            if nr.response_code == ResponseCode::NXDomain {
                FailureClass::DnsNxdomain
            } else {
                FailureClass::DnsNodata
            }
        }
        NetError::Dns(DnsError::ResponseCode(code)) => classify_rcode(*code),
        NetError::Timeout => FailureClass::DnsTimeout,
        NetError::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => FailureClass::DnsTimeout,
        _ => {
            // Exhausted nameserver pools report the last server's error as text.
            let s = e.to_string().to_ascii_lowercase();
            if s.contains("timed out") || s.contains("timeout") {
                FailureClass::DnsTimeout
            } else {
                FailureClass::DnsError
            }
        }
    }
}

/// Map a DNS response code to a failure class.
pub fn classify_rcode(code: ResponseCode) -> FailureClass {
    match code {
        ResponseCode::NXDomain => FailureClass::DnsNxdomain,
        ResponseCode::ServFail => FailureClass::DnsServfail,
        ResponseCode::Refused => FailureClass::DnsRefused,
        _ => FailureClass::DnsError,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_resolver::net::NoRecords;
    use hickory_resolver::proto::op::Query;

    fn from_file(text: Option<&str>) -> Result<TokioResolver, ResolverSetupError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("resolv.conf");
        if let Some(t) = text {
            std::fs::write(&path, t).unwrap();
        }
        build_resolver(&Dns {
            nameservers: None,
            resolv_conf: path,
            timeout: std::time::Duration::from_secs(1),
            address_family: AddressFamily::Ipv4ThenIpv6,
        })
    }

    #[tokio::test]
    async fn resolv_conf_tolerant_and_clear() {
        assert!(matches!(
            from_file(None),
            Err(ResolverSetupError::Read { .. })
        ));
        let e = from_file(Some("search example.com\noptions ndots:2\n")).err();
        assert!(
            matches!(
                e,
                Some(ResolverSetupError::NoNameserver { .. } | ResolverSetupError::Parse { .. })
            ),
            "{e:?}"
        );
        from_file(Some(
            "# glibc options readyprobe ignores\noptions rotate timeout:1 attempts:2 edns0 trust-ad single-request-reopen\nsearch corp.example\nnameserver 127.0.0.1\nnameserver ::1\n",
        ))
        .unwrap();
    }

    #[test]
    fn a_cname_to_the_stable_name_is_found() {
        let rec = |name: &str, rtype: &str, data: &str| Answer {
            name: name.into(),
            rtype: rtype.into(),
            data: data.into(),
            ttl: 60,
        };
        let chain = [
            rec("db-a.example.", "CNAME", "DB.example."),
            rec("db.example.", "A", "192.0.2.1"),
        ];
        assert_eq!(through_stable_name(&chain, "db.example"), Some(&chain[0]));
        assert_eq!(
            through_stable_name(&chain[1..], "db.example"),
            Some(&chain[1])
        );
        assert_eq!(through_stable_name(&chain[1..], "other.example"), None);
    }

    #[test]
    fn classify_table() {
        let q = || Query::query(Name::from_str("x.example.").unwrap(), RecordType::A);
        let cases: Vec<(NetError, FailureClass)> = vec![
            (
                NetError::Dns(DnsError::NoRecordsFound(NoRecords::new(
                    q(),
                    ResponseCode::NXDomain,
                ))),
                FailureClass::DnsNxdomain,
            ),
            (
                NetError::Dns(DnsError::NoRecordsFound(NoRecords::new(
                    q(),
                    ResponseCode::NoError,
                ))),
                FailureClass::DnsNodata,
            ),
            (
                NetError::Dns(DnsError::ResponseCode(ResponseCode::ServFail)),
                FailureClass::DnsServfail,
            ),
            (
                NetError::Dns(DnsError::ResponseCode(ResponseCode::Refused)),
                FailureClass::DnsRefused,
            ),
            (NetError::Timeout, FailureClass::DnsTimeout),
            (NetError::Message("garbage"), FailureClass::DnsError),
        ];
        for (e, want) in cases {
            assert_eq!(classify_dns(&e), want, "{e}");
        }
    }
}
