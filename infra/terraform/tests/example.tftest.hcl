# Plan-only tests of the example root module (examples/complete) in both modes: the alarms'
# metric contract (src/contract.rs, README's table), the namespace condition on PutMetricData,
# the grants of the evidence prefix, config object and secret, and the container definition.
# No credentials and no network: the provider skips every call a plan would make but
# GetCallerIdentity, whose one data source is overridden. Run by infra/terraform-check.sh.

provider "aws" {
  region                      = "eu-west-1"
  access_key                  = "plan-only"
  secret_key                  = "plan-only"
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  skip_region_validation      = true
}

override_data {
  target = module.readyprobe.data.aws_caller_identity.current
  values = {
    account_id = "123456789012"
  }
}

variables {
  # The example's values the assertions compare with.
  container      = "readyprobe"
  heartbeat_path = "/var/lib/readyprobe/heartbeat"
}

run "service_mode" {
  command = plan
  module {
    source = "./examples/complete"
  }
  variables {
    mode = "service"
  }

  # Readiness: one alarm per branch on Service and Branch, the quorum statistic and threshold,
  # missing data left to the health check; in the service's namespace.
  assert {
    condition = length([for n, a in output.readyprobe.alarms : n if a.metric_name == "Readiness"]) == 4 && alltrue([
      for n, a in output.readyprobe.alarms : a.period == 60 && a.unit == "None" && a.statistic == "Minimum" &&
      a.threshold == 1 && a.comparison_operator == "LessThanThreshold" && a.evaluation_periods == a.datapoints_to_alarm &&
      a.treat_missing_data == "missing" && keys(a.dimensions) == tolist(["Branch", "Service"])
      if a.metric_name == "Readiness"
    ])
    error_message = "a Readiness alarm breaks the metric contract"
  }
  assert {
    condition = (
      output.readyprobe.alarms["readyprobe-orders-db-primary-readiness"].namespace == "Readyprobe" &&
      output.readyprobe.alarms["readyprobe-orders-db-primary-readiness"].dimensions == tomap({ Service = "orders-db", Branch = "primary" }) &&
      output.readyprobe.alarms["readyprobe-payments-db-secondary-readiness"].namespace == "Payments" &&
      output.readyprobe.alarms["readyprobe-payments-db-secondary-readiness"].dimensions == tomap({ Service = "payments-db", Branch = "secondary" })
    )
    error_message = "a Readiness alarm is not in its service's namespace or on its branch"
  }
  # The alarms for people, one of each per service.
  assert {
    condition = alltrue([for s in ["orders-db", "payments-db"] :
      output.readyprobe.alarms["readyprobe-${s}-heartbeat"].metric_name == "Heartbeat" &&
      output.readyprobe.alarms["readyprobe-${s}-heartbeat"].unit == "Count" &&
      output.readyprobe.alarms["readyprobe-${s}-heartbeat"].statistic == "SampleCount" &&
      output.readyprobe.alarms["readyprobe-${s}-heartbeat"].period == 60 &&
      output.readyprobe.alarms["readyprobe-${s}-heartbeat"].threshold == 1 &&
      output.readyprobe.alarms["readyprobe-${s}-heartbeat"].comparison_operator == "LessThanThreshold" &&
      output.readyprobe.alarms["readyprobe-${s}-heartbeat"].treat_missing_data == "breaching" &&
      output.readyprobe.alarms["readyprobe-${s}-heartbeat"].dimensions == tomap({ Service = s })
    ])
    error_message = "a Heartbeat alarm breaks the metric contract"
  }
  assert {
    condition = alltrue(flatten([for s in ["orders-db", "payments-db"] : [
      for suffix, metric in { fail-open = "BothBranchesUnready", unavailable = "ServiceUnavailable" } :
      output.readyprobe.alarms["readyprobe-${s}-${suffix}"].metric_name == metric &&
      output.readyprobe.alarms["readyprobe-${s}-${suffix}"].unit == "None" &&
      output.readyprobe.alarms["readyprobe-${s}-${suffix}"].statistic == "Maximum" &&
      output.readyprobe.alarms["readyprobe-${s}-${suffix}"].period == 60 &&
      output.readyprobe.alarms["readyprobe-${s}-${suffix}"].threshold == 1 &&
      output.readyprobe.alarms["readyprobe-${s}-${suffix}"].comparison_operator == "GreaterThanOrEqualToThreshold" &&
      output.readyprobe.alarms["readyprobe-${s}-${suffix}"].treat_missing_data == "notBreaching" &&
      output.readyprobe.alarms["readyprobe-${s}-${suffix}"].dimensions == tomap({ Service = s })
    ]]))
    error_message = "a fail-open or service-unavailable alarm breaks the metric contract"
  }
  assert {
    condition = length(output.readyprobe.failover) == 4 && alltrue([for k, f in output.readyprobe.failover :
      f.health_check_type == "CLOUDWATCH_METRIC" && f.insufficient_data_health_status == "LastKnownStatus" &&
      output.readyprobe.alarms[f.alarm_name].metric_name == "Readiness" && f.alarm_region == "eu-west-1" &&
      f.record_type == "CNAME" && f.record_ttl <= 60 && f.record_failover == split("/", k)[1]
    ])
    error_message = "a health check does not follow its branch's Readiness alarm, or a record is not its failover CNAME"
  }

  # The task role: PutMetricData only into the config's namespaces; the evidence prefix, the
  # config object, the secret and its key, each alone.
  assert {
    condition = contains(jsondecode(output.readyprobe.task_role_policy).Statement, {
      Effect    = "Allow", Action = "cloudwatch:PutMetricData", Resource = "*",
      Condition = { StringEquals = { "cloudwatch:namespace" = ["Readyprobe", "Payments"] } }
    })
    error_message = "PutMetricData is not limited to the config's namespaces"
  }
  assert {
    condition = alltrue([for s in [
      { Effect = "Allow", Action = "s3:PutObject", Resource = "arn:aws:s3:::readyprobe-evidence/readyprobe/evidence/*" },
      { Effect = "Allow", Action = "s3:ListBucket", Resource = "arn:aws:s3:::readyprobe-evidence",
      Condition = { StringLike = { "s3:prefix" = "readyprobe/evidence/*" } } },
      { Effect = "Allow", Action = "s3:GetObject", Resource = "arn:aws:s3:::readyprobe-config/platform/readyprobe.toml" },
      { Effect = "Allow", Action = "secretsmanager:GetSecretValue",
      Resource = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:rds!cluster-0a1b2c3d-4e5f-6789-abcd-ef0123456789-??????" },
      { Effect   = "Allow", Action = "kms:Decrypt",
        Resource = "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
      Condition = { StringEquals = { "kms:ViaService" = "secretsmanager.eu-west-1.amazonaws.com" } } },
    ] : contains(jsondecode(output.readyprobe.task_role_policy).Statement, s)])
    error_message = "the task role lacks an exact grant of the evidence prefix, config object, secret or key"
  }
  assert {
    condition     = output.readyprobe.password_config == "password = { secrets_manager = \"rds!cluster-0a1b2c3d-4e5f-6789-abcd-ef0123456789\", json_key = \"password\" }"
    error_message = "password_config does not name the secret and its JSON key"
  }

  # The container: the image, the S3 config, the heartbeat and its health check, a stop timeout
  # above --grace (10 s) + 2 s, no secret injected by ECS, the architecture.
  assert {
    condition = length(output.readyprobe.container_definitions) == 2 && alltrue([for k, t in output.readyprobe.container_definitions :
      jsondecode(t.containers)[0].name == var.container &&
      jsondecode(t.containers)[0].image == "123456789012.dkr.ecr.eu-west-1.amazonaws.com/readyprobe@sha256:0000000000000000000000000000000000000000000000000000000000000000" &&
      jsondecode(t.containers)[0].command == ["run", "--config", "s3://readyprobe-config/platform/readyprobe.toml", "--grace", "10s"] &&
      contains(jsondecode(t.containers)[0].environment, { name = "READYPROBE_HEARTBEAT", value = var.heartbeat_path }) &&
      contains(jsondecode(t.containers)[0].environment, { name = "READYPROBE_PROBER_ID", value = "platform-${k}" }) &&
      jsondecode(t.containers)[0].healthCheck.command == ["CMD", "/usr/local/bin/readyprobe", "health"] &&
      jsondecode(t.containers)[0].stopTimeout > 10 + 2 &&
      !can(jsondecode(t.containers)[0].secrets) && t.architecture == "ARM64"
    ])
    error_message = "a container definition lacks the image, S3 config, heartbeat, health check, stop timeout or architecture"
  }
  assert {
    condition = length(output.readyprobe.runs) == 2 && alltrue([for r in output.readyprobe.runs :
      r.circuit_breaker.enable && r.circuit_breaker.rollback &&
      r.desired_count == 1 && r.minimum_healthy_percent == 0 && r.maximum_percent == 100
    ])
    error_message = "mode service: not one service per subnet with a rolling-back circuit breaker"
  }
}

run "scheduled_mode" {
  command = plan
  module {
    source = "./examples/complete"
  }
  variables {
    mode = "scheduled"
  }

  assert {
    condition = length([for n, a in output.readyprobe.alarms : n if a.metric_name == "Readiness"]) == 4 && alltrue([
      for n, a in output.readyprobe.alarms : a.period == 60 && a.unit == "None" && a.statistic == "Minimum" &&
      a.threshold == 1 && a.comparison_operator == "LessThanThreshold" && a.treat_missing_data == "missing"
      if a.metric_name == "Readiness"
    ]) && length(output.readyprobe.failover) == 4
    error_message = "mode scheduled: a Readiness alarm breaks the metric contract"
  }
  assert {
    condition = contains(jsondecode(output.readyprobe.task_role_policy).Statement, {
      Effect    = "Allow", Action = "cloudwatch:PutMetricData", Resource = "*",
      Condition = { StringEquals = { "cloudwatch:namespace" = ["Readyprobe", "Payments"] } }
    })
    error_message = "mode scheduled: PutMetricData is not limited to the config's namespaces"
  }
  assert {
    condition = alltrue([for k, t in output.readyprobe.container_definitions :
      jsondecode(t.containers)[0].command == ["run", "--config", "s3://readyprobe-config/platform/readyprobe.toml", "--grace", "10s", "--duration", "35s"] &&
      contains(jsondecode(t.containers)[0].environment, { name = "READYPROBE_HEARTBEAT", value = var.heartbeat_path }) &&
      jsondecode(t.containers)[0].healthCheck.command == ["CMD", "/usr/local/bin/readyprobe", "health"] &&
      jsondecode(t.containers)[0].stopTimeout > 10 + 2
    ])
    error_message = "mode scheduled: a container definition lacks the bounded run, heartbeat, health check or stop timeout"
  }
  assert {
    condition = length(output.readyprobe.runs) == 2 && alltrue([
      for r in output.readyprobe.runs : r.schedule_expression == "rate(1 minute)" && !can(r.circuit_breaker)
    ])
    error_message = "mode scheduled: not one schedule per subnet every minute"
  }
}

# The first step of a cutover: everything but the failover records, so the prober runs and the
# health checks follow their alarms while the old simple record still answers.
run "cutover_without_records" {
  command = plan
  module {
    source = "./examples/complete"
  }
  variables {
    create_records = false
  }

  assert {
    condition = length(output.readyprobe.failover) == 4 && alltrue([for k, f in output.readyprobe.failover :
      f.health_check_type == "CLOUDWATCH_METRIC" && f.record_type == null && f.record_failover == null
    ]) && length(output.readyprobe.container_definitions) == 2
    error_message = "create_records = false: a failover record is planned, or a health check or prober is missing"
  }
}
