output "health_check_ids" {
  description = "The CLOUDWATCH_METRIC health check of each branch, by \"<service>/<role>\"."
  value       = { for k, hc in aws_route53_health_check.readiness : k => hc.id }
}

output "readiness_alarm_names" {
  description = "The Readiness alarm of each branch, by \"<service>/<role>\" (what `readyprobe check --aws` checks)."
  value       = { for k, a in aws_cloudwatch_metric_alarm.readiness : k => a.alarm_name }
}

output "task_role_arn" {
  description = "The probers' task role."
  value       = aws_iam_role.task.arn
}

output "task_definition_arns" {
  description = "The task definition of each prober, by subnet id; its prober_id is \"<name>-<subnet id>\"."
  value       = { for k, t in aws_ecs_task_definition.prober : k => t.arn }
}
