# Branches in two regions (docs/deploy.md, regional failover): a prober in each region publishes
# to its own region's CloudWatch; this module is called in region B with alarms_only (the same
# alarms, fed by B's prober) and in region A with other_region_alarms = B's region_alarms. Per
# branch, a second CLOUDWATCH_METRIC check on B's alarm of the branch, and a CALCULATED check
# healthy only while both are (HealthThreshold 2), which the branch's record follows. Each child
# abstains (Healthy) while its region has no data: a dark or impaired region leaves the decision
# to the other.

locals {
  cross_region = var.other_region_alarms != null && !var.alarms_only
}

resource "aws_route53_health_check" "other_region" {
  for_each = local.cross_region ? local.branches : {}

  type                            = "CLOUDWATCH_METRIC"
  cloudwatch_alarm_name           = var.other_region_alarms.alarm_names[each.key]
  cloudwatch_alarm_region         = var.other_region_alarms.region
  insufficient_data_health_status = "Healthy"
  tags                            = { Name = "readyprobe-${each.value.service}-${each.value.name}-${var.other_region_alarms.region}" }

  lifecycle {
    precondition {
      condition     = var.other_region_alarms.region != data.aws_region.current.name
      error_message = "other_region_alarms is of this provider's region: the two children would be one view."
    }
  }
}

resource "aws_route53_health_check" "calculated" {
  for_each = local.cross_region ? local.branches : {}

  type                   = "CALCULATED"
  child_healthchecks     = [aws_route53_health_check.readiness[each.key].id, aws_route53_health_check.other_region[each.key].id]
  child_health_threshold = 2
  tags                   = { Name = "readyprobe-${each.value.service}-${each.value.name}-regions" }
}
