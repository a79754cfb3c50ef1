output "health_check_ids" {
  description = "The CLOUDWATCH_METRIC health check of each branch, by role."
  value       = { for role, hc in aws_route53_health_check.readiness : role => hc.id }
}

output "readiness_alarm_names" {
  description = "The Readiness alarm of each branch, by role (what `readyprobe check --aws` checks)."
  value       = { for role, a in aws_cloudwatch_metric_alarm.readiness : role => a.alarm_name }
}

output "task_role_arn" {
  description = "The prober's task role."
  value       = aws_iam_role.task.arn
}

output "task_definition_arn" {
  description = "The prober's task definition."
  value       = aws_ecs_task_definition.prober.arn
}
