# The per-service unit, repeated for each entry of var.services: one readiness alarm, health check
# and failover record per branch, and the heartbeat, fail-open and service-unavailable alarms. The
# root module (infra/terraform) calls it in the prober's account; call it on its own where the
# hosted zone and health checks live in another account (examples/cross-account). Branches in
# two regions (examples/cross-region): a call in region B with alarms_only, and one in region A
# with other_region_alarms, whose records follow CALCULATED checks of both regions' alarms
# (regions.tf).
locals {
  # One entry per branch of every service, keyed "<service>/<role>", so the alarm, health check
  # and record of one branch share a key.
  branches = {
    for b in flatten([
      for s, svc in var.services : [
        for br in svc.branches : {
          key            = "${s}/${br.role}"
          service        = s
          name           = br.name
          role           = br.role
          endpoint       = br.endpoint
          stable_name    = svc.stable_name
          hosted_zone_id = svc.hosted_zone_id
          namespace      = svc.namespace
        }
      ]
    ]) : b.key => b
  }
  # The threshold each quorum statistic is compared with (LessThanThreshold): a datum is 0 or 1.
  quorum_threshold = {
    Minimum = 1
    Maximum = 1
    Average = 0.5
  }
  alarm_actions = var.alarm_topic_arn == null ? [] : [var.alarm_topic_arn]
}

data "aws_region" "current" {}

resource "aws_cloudwatch_metric_alarm" "readiness" {
  for_each = local.branches

  alarm_name          = "readyprobe-${each.value.service}-${each.value.name}-readiness"
  alarm_description   = "Readiness of ${each.value.service} branch ${each.value.name} (${each.value.role}); followed by its Route 53 health check."
  namespace           = coalesce(each.value.namespace, var.namespace)
  metric_name         = "Readiness"
  dimensions          = { Service = each.value.service, Branch = each.value.name }
  unit                = "None"
  statistic           = var.alarm_statistic
  period              = 60
  evaluation_periods  = var.evaluation_periods
  datapoints_to_alarm = var.evaluation_periods
  threshold           = local.quorum_threshold[var.alarm_statistic]
  comparison_operator = "LessThanThreshold"
  # No datum: the alarm goes to INSUFFICIENT_DATA and the health check's
  # insufficient_data_health_status decides, as the operator chose.
  treat_missing_data = "missing"
}

resource "aws_route53_health_check" "readiness" {
  for_each = var.alarms_only ? {} : local.branches

  type                    = "CLOUDWATCH_METRIC"
  cloudwatch_alarm_name   = aws_cloudwatch_metric_alarm.readiness[each.key].alarm_name
  cloudwatch_alarm_region = data.aws_region.current.name
  # Two regions: a region without data abstains, the other decides (docs/deploy.md).
  insufficient_data_health_status = local.cross_region ? "Healthy" : var.insufficient_data_health_status
  tags                            = { Name = "readyprobe-${each.value.service}-${each.value.name}" }
}

resource "aws_route53_record" "failover" {
  for_each = var.create_records && !var.alarms_only ? local.branches : {}

  zone_id         = each.value.hosted_zone_id
  name            = each.value.stable_name
  type            = "CNAME"
  ttl             = var.record_ttl
  records         = [each.value.endpoint]
  set_identifier  = each.value.name
  health_check_id = local.cross_region ? aws_route53_health_check.calculated[each.key].id : aws_route53_health_check.readiness[each.key].id
  failover_routing_policy {
    type = each.value.role
  }
}

# Prober dead: no Heartbeat datum at all (missing data breaches) for heartbeat_missing_minutes.
resource "aws_cloudwatch_metric_alarm" "heartbeat" {
  for_each = var.services

  alarm_name          = "readyprobe-${each.key}-heartbeat"
  alarm_description   = "No readyprobe prober publishes for ${each.key}: its readiness alarms see no data."
  namespace           = coalesce(each.value.namespace, var.namespace)
  metric_name         = "Heartbeat"
  dimensions          = { Service = each.key }
  unit                = "Count"
  statistic           = "SampleCount"
  period              = 60
  evaluation_periods  = var.heartbeat_missing_minutes
  datapoints_to_alarm = var.heartbeat_missing_minutes
  threshold           = 1
  comparison_operator = "LessThanThreshold"
  treat_missing_data  = "breaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
}

# Fail-open: every branch publishes and none publishes 1, so Route 53 answers with the primary anyway.
resource "aws_cloudwatch_metric_alarm" "fail_open" {
  for_each = var.services

  alarm_name          = "readyprobe-${each.key}-fail-open"
  alarm_description   = "Both branches of ${each.key} are unready: Route 53 answers with the primary regardless."
  namespace           = coalesce(each.value.namespace, var.namespace)
  metric_name         = "BothBranchesUnready"
  dimensions          = { Service = each.key }
  unit                = "None"
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 1
  datapoints_to_alarm = 1
  threshold           = 1
  comparison_operator = "GreaterThanOrEqualToThreshold"
  # No datum means no prober runs or some branch is still unknown: the heartbeat alarm covers the first.
  treat_missing_data = "notBreaching"
  alarm_actions      = local.alarm_actions
  ok_actions         = local.alarm_actions
}

# Service not probed: a prober runs, but could not prepare this service (a missing secret, CA
# bundle or client certificate, or a bad control document); its branches publish nothing.
resource "aws_cloudwatch_metric_alarm" "service_unavailable" {
  for_each = var.services

  alarm_name          = "readyprobe-${each.key}-unavailable"
  alarm_description   = "A readyprobe prober runs without ${each.key}: see its service_unavailable evidence record, fix the input it names, then restart the prober tasks (docs/deploy.md)."
  namespace           = coalesce(each.value.namespace, var.namespace)
  metric_name         = "ServiceUnavailable"
  dimensions          = { Service = each.key }
  unit                = "None"
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 1
  datapoints_to_alarm = 1
  threshold           = 1
  comparison_operator = "GreaterThanOrEqualToThreshold"
  # No datum: every prober that runs has the service (or none runs: the heartbeat alarm).
  treat_missing_data = "notBreaching"
  alarm_actions      = local.alarm_actions
  ok_actions         = local.alarm_actions
}
