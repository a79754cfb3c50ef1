output "health_check_ids" {
  description = "The health check each branch's failover record uses, by \"<service>/<role>\" (empty with create_service_resources = false)."
  value       = local.service == null ? {} : local.service.health_check_ids
}

output "readiness_alarm_names" {
  description = "The Readiness alarm of each branch, by \"<service>/<role>\" (what `readyprobe check --aws` checks)."
  value       = local.service == null ? {} : local.service.readiness_alarm_names
}

output "task_role_arn" {
  description = "The probers' task role."
  value       = aws_iam_role.task.arn
}

output "task_definition_arns" {
  description = "The task definition of each prober, by subnet id; its prober_id is \"<name>-<subnet id>\"."
  value       = { for k, t in aws_ecs_task_definition.prober : k => t.arn }
}

output "security_group_id" {
  description = "The probers' security group: allow it inbound on each branch's security group (the probed port), or both branches stay unready (docs/deploy.md)."
  value       = aws_security_group.prober.id
}

output "password_config" {
  description = "The config's password reference for probe_secret (null without one), to paste into its [probe.mysql]."
  value       = var.probe_secret == null ? null : (var.probe_secret_json_key == null ? "password = { secrets_manager = \"${var.probe_secret}\" }" : "password = { secrets_manager = \"${var.probe_secret}\", json_key = \"${var.probe_secret_json_key}\" }")
}

output "alarms" {
  description = "Every alarm's metric settings, by alarm name: what `readyprobe check --aws` and the metric contract (README) compare."
  value       = local.service == null ? {} : local.service.alarms
}

output "failover" {
  description = "Per branch, by \"<service>/<role>\": the alarm its health check follows, and the health check's and record's settings (the record's null with create_records = false)."
  value       = local.service == null ? {} : local.service.failover
}

output "task_role_policy" {
  description = "The task role's policy document (JSON)."
  value       = data.aws_iam_policy_document.task.json
}

output "container_definitions" {
  description = "Each prober's container definitions (JSON) and CPU architecture, by subnet id."
  value       = { for k, t in aws_ecs_task_definition.prober : k => { containers = t.container_definitions, architecture = t.runtime_platform[0].cpu_architecture } }
}

output "runs" {
  description = "How each prober runs, by subnet id: mode service - its ECS service's deployment settings; mode scheduled - its schedule."
  value = merge(
    { for k, s in aws_ecs_service.prober : k => {
      service                 = s.name
      desired_count           = s.desired_count
      minimum_healthy_percent = s.deployment_minimum_healthy_percent
      maximum_percent         = s.deployment_maximum_percent
      circuit_breaker         = s.deployment_circuit_breaker[0]
    } },
    { for k, s in aws_scheduler_schedule.prober : k => {
      schedule            = s.name
      schedule_expression = s.schedule_expression
    } },
  )
}
