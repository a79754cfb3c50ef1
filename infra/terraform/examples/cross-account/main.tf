# An example root module for a hosted zone in another account than the prober: the prober in the
# workload account (aws), the publish role and each service's alarms, health checks and failover
# records in the DNS account (aws.dns). The prober's config names the role:
#   [publish.cloudwatch]
#   region      = "eu-central-1"
#   role_arn    = "arn:aws:iam::210987654321:role/readyprobe-publish"
#   external_id = "<external_id below>"
# `terraform test` (tests/cross_account.tftest.hcl) plans it; copy it and replace every value.
variable "external_id" {
  description = "The config's external_id (2-1224 of A-Z a-z 0-9 + = , . @ : / -)."
  type        = string
  default     = "readyprobe-orders-2f7c"
}

provider "aws" {
  region = "eu-west-1" # the workload account: ECS, the task role, the state and evidence buckets
}

provider "aws" {
  alias  = "dns"          # the account of the private hosted zone and the health checks
  region = "eu-central-1" # where the alarms live: the region the prober publishes into
  assume_role {
    role_arn = "arn:aws:iam::210987654321:role/terraform" # yours: how you deploy into that account
  }
}

locals {
  # The role's ARN is known before it exists (its name is fixed), so the prober can name it.
  publish_role_arn = "arn:aws:iam::210987654321:role/readyprobe-publish"
  services = {
    "orders-db" = {
      stable_name    = "mysql.orders.internal.example"
      hosted_zone_id = "Z0123456789ABCDEFGHIJ"
      branches = [
        { name = "primary", role = "PRIMARY", endpoint = "mysql-primary.orders.internal.example" },
        { name = "secondary", role = "SECONDARY", endpoint = "mysql-secondary.orders.internal.example" },
      ]
    }
    "payments-db" = {
      stable_name    = "mysql.payments.internal.example"
      hosted_zone_id = "Z0123456789ABCDEFGHIJ"
      namespace      = "Payments"
      branches = [
        { name = "primary", role = "PRIMARY", endpoint = "mysql-primary.payments.internal.example" },
        { name = "secondary", role = "SECONDARY", endpoint = "mysql-secondary.payments.internal.example" },
      ]
    }
  }
}

# The prober, in the workload account, without the per-service unit; its task role may assume
# the publish role.
module "readyprobe" {
  source = "../.."

  name                            = "platform"
  services                        = local.services
  create_service_resources        = false
  publish_role_arns               = [local.publish_role_arn]
  insufficient_data_health_status = "LastKnownStatus" # unused here (no health check), required
  cluster_arn                     = "arn:aws:ecs:eu-west-1:123456789012:cluster/platform"
  vpc_id                          = "vpc-0123456789abcdef0"
  subnet_ids                      = ["subnet-0aaaaaaaaaaaaaaaa", "subnet-0bbbbbbbbbbbbbbbb"]
  probe_egress_cidr               = "10.20.0.0/16"
  image                           = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/readyprobe@sha256:0000000000000000000000000000000000000000000000000000000000000000"
  config_s3_uri                   = "s3://readyprobe-config/platform/readyprobe.toml"
  state_bucket                    = "readyprobe-state"
}

# The publish role, in the DNS account, trusting the prober's task role with the external id.
module "publish_role" {
  source    = "../../modules/publish-role"
  providers = { aws = aws.dns }

  trusted_role_arns = [module.readyprobe.task_role_arn]
  external_id       = var.external_id
  namespaces        = ["Readyprobe", "Payments"] # publish.namespace and each service's own
}

# Each service's alarms, health checks and failover records, in the DNS account.
module "service" {
  source = "../../modules/service"
  providers = {
    aws = aws.dns
  }

  services                        = local.services
  insufficient_data_health_status = "LastKnownStatus"
}

output "readyprobe" {
  description = "The prober's outputs (its per-service outputs are empty: module.service has them)."
  value       = module.readyprobe
}

output "publish_role" {
  description = "The publish role: role_arn (the config's role_arn), its trust and policies."
  value       = module.publish_role
}

output "service" {
  description = "The per-service unit in the DNS account: alarms, health checks, records."
  value       = module.service
}
