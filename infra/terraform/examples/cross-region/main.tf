# An example root module for branches in two regions (docs/deploy.md, regional failover): the
# PRIMARY branch in region A (eu-west-1), the SECONDARY in region B (eu-central-1). A prober in each
# region probes both branches and publishes only to its own region's CloudWatch (its config's
# [publish.cloudwatch] region is its own; no cross-region publish target), so each region's
# alarms are an independent view. Each branch's failover record follows a CALCULATED health check
# healthy only while both regions' alarms are (HealthThreshold 2); each region's child abstains
# (Healthy) without data, so a dark or impaired region leaves the decision to the other.
# With the hosted zone in another account, give modules/service that account's providers and
# both probers the publish role (examples/cross-account). `terraform test`
# (tests/cross_region.tftest.hcl) plans it; copy it and replace every value.
provider "aws" {
  region = "eu-west-1" # region A
}

provider "aws" {
  alias  = "b"
  region = "eu-central-1" # region B
}

locals {
  services = {
    "orders-db" = {
      stable_name    = "mysql.orders.internal.example"
      hosted_zone_id = "Z0123456789ABCDEFGHIJ" # associated with both regions' VPCs
      branches = [
        { name = "primary", role = "PRIMARY", endpoint = "mysql-primary.orders.internal.example" },
        { name = "secondary", role = "SECONDARY", endpoint = "mysql-secondary.orders.internal.example" },
      ]
    }
  }
  # What both probers share; each adds its region's cluster, network and buckets.
  prober = {
    image = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/readyprobe@sha256:0000000000000000000000000000000000000000000000000000000000000000"
  }
}

# The prober of region A (its config publishes to eu-west-1).
module "prober_a" {
  source = "../.."

  name                            = "platform-a"
  services                        = local.services
  create_service_resources        = false # modules/service below, for both regions
  insufficient_data_health_status = "Healthy"
  cluster_arn                     = "arn:aws:ecs:eu-west-1:123456789012:cluster/platform"
  vpc_id                          = "vpc-0aaaaaaaaaaaaaaaa"
  subnet_ids                      = ["subnet-0aaaaaaaaaaaaaaaa"]
  probe_egress_cidr               = "10.0.0.0/8" # both branches, across the regions' peering
  image                           = local.prober.image
  config_s3_uri                   = "s3://readyprobe-config-a/platform/readyprobe.toml"
  state_bucket                    = "readyprobe-state-a"
}

# The prober of region B (its config publishes to eu-central-1).
module "prober_b" {
  source    = "../.."
  providers = { aws = aws.b }

  name                            = "platform-b"
  services                        = local.services
  create_service_resources        = false
  insufficient_data_health_status = "Healthy"
  cluster_arn                     = "arn:aws:ecs:eu-central-1:123456789012:cluster/platform"
  vpc_id                          = "vpc-0bbbbbbbbbbbbbbbb"
  subnet_ids                      = ["subnet-0bbbbbbbbbbbbbbbb"]
  probe_egress_cidr               = "10.0.0.0/8"
  image                           = local.prober.image
  config_s3_uri                   = "s3://readyprobe-config-b/platform/readyprobe.toml"
  state_bucket                    = "readyprobe-state-b"
}

# Region B's alarms (fed by prober B), the same as region A's: no health check or record.
module "service_b" {
  source    = "../../modules/service"
  providers = { aws = aws.b }

  services                        = local.services
  alarms_only                     = true
  insufficient_data_health_status = "Healthy" # unused with alarms_only, required
}

# Region A's alarms, both regions' health checks and the records (Route 53 is global).
module "service" {
  source = "../../modules/service"

  services                        = local.services
  other_region_alarms             = module.service_b.region_alarms # so B's alarms come first
  insufficient_data_health_status = "Healthy"                      # each child's, fixed then
}

output "prober_a" {
  description = "Region A's prober."
  value       = module.prober_a
}

output "prober_b" {
  description = "Region B's prober."
  value       = module.prober_b
}

output "service_b" {
  description = "Region B's alarms."
  value       = module.service_b
}

output "service" {
  description = "Region A's alarms, the health checks, the records."
  value       = module.service
}
