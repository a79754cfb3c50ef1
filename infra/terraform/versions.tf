# The readyprobe module: one prober (its tasks on ECS Fargate, roles, log group) for every
# service of its config, and per service (var.services) a readiness alarm and CLOUDWATCH_METRIC
# health check per branch, the failover records, and the heartbeat, fail-open and
# service-unavailable alarms. The same resources as infra/cloudformation/ (readyprobe.yaml once,
# readyprobe-service.yaml per service); docs/deploy.md explains the choices.
terraform {
  required_version = ">= 1.5"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.40"
    }
  }
}
