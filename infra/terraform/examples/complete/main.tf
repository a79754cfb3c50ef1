# An example root module: two services, one prober per subnet, the config object in S3, evidence
# to S3 and the password from an RDS-managed secret. `terraform test` (tests/) plans it in both
# modes; copy it and replace every value.
variable "mode" {
  description = "service or scheduled (the module's mode)."
  type        = string
  default     = "service"
}

variable "create_records" {
  description = "false for the first step of a cutover (docs/deploy.md)."
  type        = bool
  default     = true
}

provider "aws" {
  region = "eu-west-1"
}

module "readyprobe" {
  source = "../.." # yours: "git::https://example.com/readyprobe.git//infra/terraform?ref=<tag>"

  name           = "platform" # prober ids platform-<subnet id>
  mode           = var.mode   # scheduled: optionally schedule_minutes (the run length follows from it)
  create_records = var.create_records
  services = { # keys: the config's service names
    "orders-db" = {
      stable_name    = "mysql.orders.internal.example"
      hosted_zone_id = "Z0123456789ABCDEFGHIJ" # the private hosted zone
      branches = [
        { name = "primary", role = "PRIMARY", endpoint = "mysql-primary.orders.internal.example" },
        { name = "secondary", role = "SECONDARY", endpoint = "mysql-secondary.orders.internal.example" },
      ]
    }
    "payments-db" = {
      stable_name    = "mysql.payments.internal.example"
      hosted_zone_id = "Z0123456789ABCDEFGHIJ"
      namespace      = "Payments" # only when the config gives the service its own namespace
      branches = [
        { name = "primary", role = "PRIMARY", endpoint = "mysql-primary.payments.internal.example" },
        { name = "secondary", role = "SECONDARY", endpoint = "mysql-secondary.payments.internal.example" },
      ]
    }
  }

  # Required, no default: what a health check says while its alarm has no data.
  insufficient_data_health_status = "LastKnownStatus"
  alarm_statistic                 = "Minimum" # any prober saying unready fails the branch

  cluster_arn       = "arn:aws:ecs:eu-west-1:123456789012:cluster/platform"
  vpc_id            = "vpc-0123456789abcdef0"
  subnet_ids        = ["subnet-0aaaaaaaaaaaaaaaa", "subnet-0bbbbbbbbbbbbbbbb"] # one prober each
  probe_egress_cidr = "10.20.0.0/16"
  architecture      = "ARM64" # the image pushed for linux/arm64 (docs/deploy.md)

  image                    = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/readyprobe@sha256:0000000000000000000000000000000000000000000000000000000000000000"
  config_s3_uri            = "s3://readyprobe-config/platform/readyprobe.toml"
  state_bucket             = "readyprobe-state"
  evidence_bucket          = "readyprobe-evidence"
  probe_secret             = "rds!cluster-0a1b2c3d-4e5f-6789-abcd-ef0123456789"
  probe_secret_json_key    = "password"
  probe_secret_kms_key_arn = "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
  alarm_topic_arn          = "arn:aws:sns:eu-west-1:123456789012:oncall"
}

output "readyprobe" {
  description = "Every output of the module: health_check_ids, security_group_id (allow it inbound on the branches' security groups), password_config (paste into the config), alarms, ..."
  value       = module.readyprobe
}
