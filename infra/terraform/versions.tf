# The readyprobe module: the prober on ECS Fargate, one readiness alarm and CLOUDWATCH_METRIC
# health check per branch, the failover records, the heartbeat and fail-open alarms. The same
# resources as infra/cloudformation/readyprobe.yaml; docs/deploy.md explains the choices.
terraform {
  required_version = ">= 1.5"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.40"
    }
  }
}
