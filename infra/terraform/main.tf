# The per-service unit (modules/service) in the prober's account: for each entry of
# var.services a readiness alarm and CLOUDWATCH_METRIC health check per branch, the failover
# records, and the heartbeat, fail-open and service-unavailable alarms. With the hosted zone in
# another account, set create_service_resources = false and call modules/service there
# (examples/cross-account); the prober itself is prober.tf.
module "service" {
  source = "./modules/service"
  count  = var.create_service_resources ? 1 : 0

  services                        = var.services
  namespace                       = var.namespace
  record_ttl                      = var.record_ttl
  create_records                  = var.create_records
  alarm_statistic                 = var.alarm_statistic
  evaluation_periods              = var.evaluation_periods
  insufficient_data_health_status = var.insufficient_data_health_status
  heartbeat_missing_minutes       = var.heartbeat_missing_minutes
  alarm_topic_arn                 = var.alarm_topic_arn
}

locals {
  service = var.create_service_resources ? module.service[0] : null
}

data "aws_region" "current" {}

# These resources were the root module's own before modules/service existed.
moved {
  from = aws_cloudwatch_metric_alarm.readiness
  to   = module.service[0].aws_cloudwatch_metric_alarm.readiness
}
moved {
  from = aws_route53_health_check.readiness
  to   = module.service[0].aws_route53_health_check.readiness
}
moved {
  from = aws_route53_record.failover
  to   = module.service[0].aws_route53_record.failover
}
moved {
  from = aws_cloudwatch_metric_alarm.heartbeat
  to   = module.service[0].aws_cloudwatch_metric_alarm.heartbeat
}
moved {
  from = aws_cloudwatch_metric_alarm.fail_open
  to   = module.service[0].aws_cloudwatch_metric_alarm.fail_open
}
moved {
  from = aws_cloudwatch_metric_alarm.service_unavailable
  to   = module.service[0].aws_cloudwatch_metric_alarm.service_unavailable
}
