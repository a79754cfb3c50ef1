output "health_check_ids" {
  description = "The health check each branch's failover record uses, by \"<service>/<role>\"."
  value       = { for k, hc in aws_route53_health_check.readiness : k => local.cross_region ? aws_route53_health_check.calculated[k].id : hc.id }
}

output "readiness_alarm_names" {
  description = "The Readiness alarm of each branch, by \"<service>/<role>\" (what `readyprobe check --aws` checks)."
  value       = { for k, a in aws_cloudwatch_metric_alarm.readiness : k => a.alarm_name }
}

output "alarms" {
  description = "Every alarm's metric settings, by alarm name: what `readyprobe check --aws` and the metric contract (README) compare."
  value = { for a in concat(values(aws_cloudwatch_metric_alarm.readiness), values(aws_cloudwatch_metric_alarm.heartbeat), values(aws_cloudwatch_metric_alarm.fail_open), values(aws_cloudwatch_metric_alarm.service_unavailable)) : a.alarm_name => {
    namespace           = a.namespace
    metric_name         = a.metric_name
    dimensions          = a.dimensions
    unit                = a.unit
    statistic           = a.statistic
    period              = a.period
    evaluation_periods  = a.evaluation_periods
    datapoints_to_alarm = a.datapoints_to_alarm
    threshold           = a.threshold
    comparison_operator = a.comparison_operator
    treat_missing_data  = a.treat_missing_data
  } }
}

output "failover" {
  description = "Per branch, by \"<service>/<role>\": the alarm its health check follows, and the health check's and record's settings (the record's null with create_records = false)."
  value = { for k, h in aws_route53_health_check.readiness : k => {
    health_check_type               = h.type
    alarm_name                      = h.cloudwatch_alarm_name
    alarm_region                    = h.cloudwatch_alarm_region
    insufficient_data_health_status = h.insufficient_data_health_status
    record_type                     = try(aws_route53_record.failover[k].type, null)
    record_ttl                      = try(aws_route53_record.failover[k].ttl, null)
    record_failover                 = try(aws_route53_record.failover[k].failover_routing_policy[0].type, null)
    record_target                   = try(aws_route53_record.failover[k].records, null)
    # other_region_alarms: the CALCULATED check the record follows, and its other child.
    calculated_threshold    = try(aws_route53_health_check.calculated[k].child_health_threshold, null)
    other_alarm_name        = try(aws_route53_health_check.other_region[k].cloudwatch_alarm_name, null)
    other_alarm_region      = try(aws_route53_health_check.other_region[k].cloudwatch_alarm_region, null)
    other_insufficient_data = try(aws_route53_health_check.other_region[k].insufficient_data_health_status, null)
  } }
}

output "region_alarms" {
  description = "This call's region and Readiness alarm names by \"<service>/<role>\": the other call's other_region_alarms, for branches in two regions."
  value = {
    region      = data.aws_region.current.name
    alarm_names = { for k, a in aws_cloudwatch_metric_alarm.readiness : k => a.alarm_name }
  }
}
