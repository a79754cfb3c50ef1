# Plan-only tests of the cross-account layout (examples/cross-account): the prober in the
# workload account without the per-service unit, allowed to assume the publish role only; the
# publish role and the per-service unit through the DNS account's provider (aws.dns). And the
# publish role module alone: its trust (the task role, the external id) and its validations.
# No credentials and no network, as example.tftest.hcl. Run by infra/terraform-check.sh.

provider "aws" {
  region                      = "eu-west-1"
  access_key                  = "plan-only"
  secret_key                  = "plan-only"
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  skip_region_validation      = true
}

provider "aws" {
  alias                       = "dns"
  region                      = "eu-central-1"
  access_key                  = "plan-only-dns"
  secret_key                  = "plan-only-dns"
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

run "cross_account" {
  command = plan
  module {
    source = "./examples/cross-account"
  }
  providers = {
    aws     = aws
    aws.dns = aws.dns
  }

  # The workload account: the prober, no alarm, health check or record.
  assert {
    condition     = length(output.readyprobe.alarms) == 0 && length(output.readyprobe.failover) == 0 && length(output.readyprobe.container_definitions) == 2
    error_message = "create_service_resources = false: the prober's account still gets per-service resources, or lost a prober"
  }
  # Its task role may assume the publish role, and no other.
  assert {
    condition = contains(jsondecode(output.readyprobe.task_role_policy).Statement, {
      Effect = "Allow", Action = "sts:AssumeRole", Resource = "arn:aws:iam::210987654321:role/readyprobe-publish"
    }) && length([for s in jsondecode(output.readyprobe.task_role_policy).Statement : s if can(regex("sts:", jsonencode(s.Action)))]) == 1
    error_message = "the task role may not assume exactly the publish role"
  }
  # The DNS account: the metric contract of each Readiness alarm, a health check following it.
  assert {
    condition = length([for n, a in output.service.alarms : n if a.metric_name == "Readiness"]) == 4 && alltrue([
      for n, a in output.service.alarms : a.period == 60 && a.unit == "None" && a.statistic == "Minimum" &&
      a.threshold == 1 && a.comparison_operator == "LessThanThreshold" && a.treat_missing_data == "missing"
      if a.metric_name == "Readiness"
    ]) && length(output.service.alarms) == 10
    error_message = "the DNS account's alarms break the metric contract"
  }
  assert {
    condition = length(output.service.failover) == 4 && alltrue([for k, f in output.service.failover :
      f.health_check_type == "CLOUDWATCH_METRIC" && output.service.alarms[f.alarm_name].metric_name == "Readiness" &&
      f.alarm_region == "eu-central-1" && f.record_type == "CNAME" && f.record_failover == split("/", k)[1]
    ])
    error_message = "a DNS-account health check does not follow its branch's Readiness alarm, or a record is not its failover CNAME"
  }
  # The publish role: PutMetricData into the config's namespaces only, the readers' reads.
  assert {
    condition = jsondecode(output.publish_role.policies.publish).Statement == [{
      Effect    = "Allow", Action = "cloudwatch:PutMetricData", Resource = "*",
      Condition = { StringEquals = { "cloudwatch:namespace" = ["Readyprobe", "Payments"] } }
    }]
    error_message = "the publish role may publish outside the config's namespaces"
  }
  assert {
    condition = alltrue([for s in jsondecode(output.publish_role.policies.read).Statement :
    s.Resource == "*" && alltrue([for a in s.Action : can(regex("^(cloudwatch|route53):(Describe|List|Get)", a))])])
    error_message = "the publish role's read policy grants more than reads"
  }
}

# The role module alone, with a known trusted role: the trust document exactly.
run "publish_role_trust" {
  command = plan
  module {
    source = "./modules/publish-role"
  }
  providers = {
    aws = aws.dns
  }
  variables {
    trusted_role_arns = ["arn:aws:iam::123456789012:role/readyprobe-task-abc"]
    external_id       = "readyprobe-orders-2f7c"
  }
  assert {
    condition = jsondecode(output.trust_policy).Statement == [{
      Effect    = "Allow", Action = "sts:AssumeRole",
      Principal = { AWS = "arn:aws:iam::123456789012:role/readyprobe-task-abc" },
      Condition = { StringEquals = { "sts:ExternalId" = "readyprobe-orders-2f7c" } }
    }]
    error_message = "the publish role trusts more than the task role with the external id"
  }
}

run "publish_role_refuses_bad_values" {
  command = plan
  module {
    source = "./modules/publish-role"
  }
  providers = {
    aws = aws.dns
  }
  variables {
    trusted_role_arns = ["arn:aws:iam::123456789012:user/someone"]
    external_id       = "x"
    role_name         = "a name with spaces"
    namespaces        = ["AWS/EC2"]
  }
  expect_failures = [var.trusted_role_arns, var.external_id, var.role_name, var.namespaces]
}
