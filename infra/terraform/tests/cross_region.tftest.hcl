# Plan-only tests of the cross-region layout (examples/cross-region): a prober per region, the
# same alarms in both regions, per branch a CLOUDWATCH_METRIC check on each region's alarm (both
# Healthy without data) and a CALCULATED check of the two with HealthThreshold 2, which the
# record follows; other_region_alarms refused when it is the provider's own region. No
# credentials and no network, as example.tftest.hcl. Run by infra/terraform-check.sh.

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
  alias                       = "b"
  region                      = "eu-central-1"
  access_key                  = "plan-only"
  secret_key                  = "plan-only"
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  skip_region_validation      = true
}

override_data {
  target = module.prober_a.data.aws_caller_identity.current
  values = {
    account_id = "123456789012"
  }
}

override_data {
  target = module.prober_b.data.aws_caller_identity.current
  values = {
    account_id = "123456789012"
  }
}

run "cross_region" {
  command = plan
  module {
    source = "./examples/cross-region"
  }
  providers = {
    aws   = aws
    aws.b = aws.b
  }

  # A prober in each region, neither with per-service resources of its own.
  assert {
    condition     = length(output.prober_a.container_definitions) == 1 && length(output.prober_b.container_definitions) == 1 && length(output.prober_a.alarms) == 0 && length(output.prober_b.alarms) == 0
    error_message = "not one prober per region, or a prober module made per-service resources"
  }
  # The same alarms in both regions, each on the metric contract.
  assert {
    condition = alltrue([for alarms in [output.service.alarms, output.service_b.alarms] :
      length([for n, a in alarms : n if a.metric_name == "Readiness"]) == 2 && length(alarms) == 5 && alltrue([
        for n, a in alarms : a.period == 60 && a.unit == "None" && a.statistic == "Minimum" &&
        a.threshold == 1 && a.comparison_operator == "LessThanThreshold" && a.treat_missing_data == "missing"
        if a.metric_name == "Readiness"
    ])]) && output.service.alarms == output.service_b.alarms
    error_message = "the two regions do not hold the same alarms on the metric contract"
  }
  # Per branch: a child on each region's alarm, both Healthy without data; the CALCULATED check needs both.
  assert {
    condition = length(output.service.failover) == 2 && alltrue([for k, f in output.service.failover :
      f.health_check_type == "CLOUDWATCH_METRIC" && f.alarm_region == "eu-west-1" && f.insufficient_data_health_status == "Healthy" &&
      f.other_alarm_region == "eu-central-1" && f.other_insufficient_data == "Healthy" && f.other_alarm_name == f.alarm_name &&
      output.service.alarms[f.alarm_name].metric_name == "Readiness" && f.calculated_threshold == 2 &&
      f.record_type == "CNAME" && f.record_failover == split("/", k)[1]
    ])
    error_message = "a branch's record does not follow a CALCULATED check of both regions' alarms, each Healthy without data"
  }
  # Region B: alarms only.
  assert {
    condition     = length(output.service_b.failover) == 0 && length(output.service_b.health_check_ids) == 0
    error_message = "alarms_only: region B's call made a health check or record"
  }
}

# other_region_alarms of the provider's own region: the two children would be one view.
run "refuses_the_own_region_as_the_other" {
  command = plan
  module {
    source = "./modules/service"
  }
  variables {
    other_region_alarms = {
      region      = "eu-west-1"
      alarm_names = { "orders-db/PRIMARY" = "a", "orders-db/SECONDARY" = "b" }
    }
    insufficient_data_health_status = "Healthy"
    services = {
      "orders-db" = {
        stable_name    = "mysql.orders.internal.example"
        hosted_zone_id = "Z0123456789ABCDEFGHIJ"
        branches = [
          { name = "primary", role = "PRIMARY", endpoint = "mysql-primary.orders.internal.example" },
          { name = "secondary", role = "SECONDARY", endpoint = "mysql-secondary.orders.internal.example" },
        ]
      }
    }
  }
  expect_failures = [aws_route53_health_check.other_region]
}
