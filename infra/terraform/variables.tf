variable "name" {
  description = "The prober's name: its ECS task family, service and schedule names, its log group /readyprobe/<name>, and the prefix of each task's prober_id."
  type        = string
  validation {
    condition     = can(regex("^[A-Za-z0-9-]{1,24}$", var.name))
    error_message = "name: 1-24 of A-Z a-z 0-9 -"
  }
}

variable "namespace" {
  description = "The config's publish.namespace."
  type        = string
  default     = "Readyprobe"
  validation {
    condition     = can(regex("^[0-9A-Za-z.\\-_/#: ]{1,255}$", var.namespace)) && !startswith(var.namespace, "AWS/") && !startswith(var.namespace, ":")
    error_message = "namespace: 1-255 of 0-9 A-Z a-z . - _ / # : and space, not starting with AWS/ or :"
  }
}

variable "services" {
  description = "The config's services, by service.name (the Service dimension): each one's stable_name (the failover record's name), the private hosted zone that holds it, its namespace when the config gives the service one (default: namespace), and its two branches: the config's branch name (the Branch dimension), its role, and its branch-specific DNS name (the record's CNAME target)."
  type = map(object({
    stable_name    = string
    hosted_zone_id = string
    namespace      = optional(string)
    branches = list(object({
      name     = string
      role     = string
      endpoint = string
    }))
  }))
  validation {
    condition     = length(var.services) >= 1 && alltrue([for s in keys(var.services) : can(regex("^[A-Za-z0-9._-]{1,64}$", s))])
    error_message = "services: at least one; each key (the config's service.name) 1-64 of A-Z a-z 0-9 . _ -"
  }
  validation {
    condition     = alltrue([for s in values(var.services) : length(s.branches) == 2 && length(setintersection(toset([for b in s.branches : b.role]), toset(["PRIMARY", "SECONDARY"]))) == 2])
    error_message = "services: each has exactly two branches, one with role PRIMARY and one with role SECONDARY."
  }
  validation {
    condition     = alltrue([for s in values(var.services) : length(toset([for b in s.branches : b.name])) == 2 && alltrue([for b in s.branches : can(regex("^[A-Za-z0-9._-]{1,64}$", b.name))])])
    error_message = "services: the two branch names of a service differ, each 1-64 of A-Z a-z 0-9 . _ -"
  }
  validation {
    condition     = alltrue(flatten([for s in values(var.services) : [for n in concat([s.stable_name], [for b in s.branches : b.endpoint]) : can(regex("^([A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?\\.)+[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$", n)) && length(n) <= 253]]))
    error_message = "services: stable_name and each endpoint are DNS names of two or more labels (letters, digits, - and _), at most 253 characters."
  }
  validation {
    condition     = alltrue([for s in values(var.services) : s.namespace == null || (can(regex("^[0-9A-Za-z.\\-_/#: ]{1,255}$", s.namespace)) && !startswith(coalesce(s.namespace, "-"), "AWS/") && !startswith(coalesce(s.namespace, "-"), ":"))])
    error_message = "services: a namespace is 1-255 of 0-9 A-Z a-z . - _ / # : and space, not starting with AWS/ or :"
  }
  validation {
    condition     = alltrue([for s in values(var.services) : alltrue([for b in s.branches : lower(b.endpoint) != lower(s.stable_name)])])
    error_message = "services: no branch endpoint may be the service's stable_name (a CNAME to itself; the prober would probe whatever Route 53 answers)."
  }
  validation {
    condition     = alltrue([for s in values(var.services) : can(regex("^Z[A-Z0-9]{1,31}$", s.hosted_zone_id))])
    error_message = "services: hosted_zone_id is a Route 53 hosted zone id (Z followed by upper-case letters and digits)."
  }
}

variable "create_service_resources" {
  description = "Create each service's alarms, health checks and records here (modules/service, in this provider's account). false where they live in another account: call modules/service there, and publish through its role (publish_role_arns; docs/deploy.md)."
  type        = bool
  default     = true
  nullable    = false
  validation {
    condition     = contains([true, false], var.create_service_resources)
    error_message = "create_service_resources: true or false."
  }
}

variable "publish_role_arns" {
  description = "Roles in other accounts the config publishes through ([publish.cloudwatch] role_arn, a service's publish role_arn): each publish-role module's role_arn. The task role may sts:AssumeRole these only (empty - none)."
  type        = list(string)
  default     = []
  nullable    = false
  validation {
    condition     = alltrue([for r in var.publish_role_arns : can(regex("^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]+$", r)) && length(r) <= 600])
    error_message = "publish_role_arns: IAM role ARNs (arn:<partition>:iam::<12 digits>:role/<path/name>)."
  }
}

variable "record_ttl" {
  description = "TTL of the failover records, seconds (at most 60, so that clients follow a failover within a minute)."
  type        = number
  default     = 60
  validation {
    condition     = var.record_ttl >= 1 && var.record_ttl <= 60
    error_message = "record_ttl: 1 to 60 seconds."
  }
}

variable "create_records" {
  description = "Create the failover records. false deploys the alarms, health checks and probers without them: the first step of a cutover where the stable name already exists as a simple record (docs/deploy.md)."
  type        = bool
  default     = true
  nullable    = false
  validation {
    condition     = contains([true, false], var.create_records)
    error_message = "create_records: true or false."
  }
}

variable "alarm_statistic" {
  description = "The quorum rule over the probers' datums in a minute: Minimum - any prober says unready; Maximum - all do; Average - a majority does."
  type        = string
  default     = "Minimum"
  validation {
    condition     = contains(["Minimum", "Maximum", "Average"], var.alarm_statistic)
    error_message = "alarm_statistic: Minimum, Maximum or Average."
  }
}

variable "evaluation_periods" {
  description = "Minutes the statistic must be below its threshold (datapoints_to_alarm is the same; readyprobe holds the hysteresis)."
  type        = number
  default     = 1
  validation {
    condition     = var.evaluation_periods >= 1 && var.evaluation_periods <= 5
    error_message = "evaluation_periods: 1 to 5."
  }
}

variable "insufficient_data_health_status" {
  description = "What each health check reports while its alarm has no data (no prober runs, or all are unknown). No default: the operator chooses (docs/deploy.md)."
  type        = string
  validation {
    condition     = contains(["Healthy", "Unhealthy", "LastKnownStatus"], var.insufficient_data_health_status)
    error_message = "insufficient_data_health_status: Healthy, Unhealthy or LastKnownStatus."
  }
}

variable "heartbeat_missing_minutes" {
  description = "Minutes without any Heartbeat datum before the prober-dead alarm fires."
  type        = number
  default     = 3
  validation {
    condition     = var.heartbeat_missing_minutes >= 2 && var.heartbeat_missing_minutes <= 10
    error_message = "heartbeat_missing_minutes: 2 to 10."
  }
}

variable "alarm_topic_arn" {
  description = "SNS topic for the heartbeat, fail-open and service-unavailable alarms (null - no action)."
  type        = string
  default     = null
  validation {
    condition     = var.alarm_topic_arn == null || can(regex("^arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:[A-Za-z0-9_-]{1,256}(\\.fifo)?$", var.alarm_topic_arn))
    error_message = "alarm_topic_arn: null or an SNS topic ARN."
  }
}

variable "mode" {
  description = "service - one ECS service per subnet (Availability Zone) with one task each; scheduled - one EventBridge Scheduler schedule per subnet runs a bounded task every schedule_minutes."
  type        = string
  default     = "service"
  validation {
    condition     = contains(["service", "scheduled"], var.mode)
    error_message = "mode: service or scheduled."
  }
}

variable "cluster_arn" {
  description = "ARN of the ECS cluster the prober runs in."
  type        = string
  validation {
    condition     = can(regex("^arn:aws[a-z-]*:ecs:[a-z0-9-]+:[0-9]{12}:cluster/[A-Za-z0-9_-]{1,255}$", var.cluster_arn))
    error_message = "cluster_arn: an ECS cluster ARN."
  }
}

variable "schedule_minutes" {
  description = "Mode scheduled: the schedule's rate in minutes. Each run lasts the rate less 25 s (docs/deploy.md, scheduled mode), so runs neither overlap nor leave a gap the policy's window cannot bridge."
  type        = number
  default     = 1
  validation {
    condition     = contains([1, 2, 5, 10, 15, 30, 60], var.schedule_minutes)
    error_message = "schedule_minutes: 1, 2, 5, 10, 15, 30 or 60."
  }
}

variable "vpc_id" {
  description = "The VPC of the branches and of the private hosted zones."
  type        = string
  validation {
    condition     = can(regex("^vpc-[0-9a-f]{8,17}$", var.vpc_id))
    error_message = "vpc_id: a VPC id (vpc-...)."
  }
}

variable "subnet_ids" {
  description = "Private subnets, one per Availability Zone. Mode service: one prober task per subnet, with the stable prober_id <name>-<subnet id>."
  type        = list(string)
  validation {
    condition     = length(var.subnet_ids) >= 1 && length(toset(var.subnet_ids)) == length(var.subnet_ids) && alltrue([for s in var.subnet_ids : can(regex("^subnet-[0-9a-f]{8,17}$", s))])
    error_message = "subnet_ids: at least one subnet id (subnet-...), each once."
  }
}

variable "probe_egress_cidr" {
  description = "Where the branches and the VPC resolver are (all TCP and DNS over UDP to it)."
  type        = string
  validation {
    condition     = can(cidrhost(var.probe_egress_cidr, 0))
    error_message = "probe_egress_cidr: an IPv4 CIDR block."
  }
}

variable "extra_security_group_ids" {
  description = "Further security groups for the tasks."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for s in var.extra_security_group_ids : can(regex("^sg-[0-9a-f]{8,17}$", s))])
    error_message = "extra_security_group_ids: security group ids (sg-...)."
  }
}

variable "image" {
  description = "The readyprobe image (Dockerfile at the repository root), by digest preferably."
  type        = string
  validation {
    # RE2 refuses repeat counts above 1000, so the length is checked apart from the pattern.
    condition     = length(var.image) <= 1024 && can(regex("^[^\\s]+$", var.image))
    error_message = "image: an image reference without spaces."
  }
}

variable "config_path" {
  description = "The config file inside the container (baked into the image, or on the EFS file system below)."
  type        = string
  default     = "/etc/readyprobe/readyprobe.toml"
  validation {
    condition     = length(var.config_path) <= 4096 && can(regex("^/[A-Za-z0-9._/-]+$", var.config_path))
    error_message = "config_path: an absolute path of A-Z a-z 0-9 . _ / -"
  }
}

variable "config_s3_uri" {
  description = "s3://bucket/key of the config object: the prober runs with --config s3://bucket/key, polls it (its [reload] poll, default 30 s) and applies a change as SIGHUP would; the task role may GetObject that object only (null - config_path, baked into the image or on the EFS file system below)."
  type        = string
  default     = null
  validation {
    condition     = var.config_s3_uri == null || (length(coalesce(var.config_s3_uri, "-")) <= 1090 && can(regex("^s3://[a-z0-9][a-z0-9.-]+[a-z0-9]/[A-Za-z0-9!_.'()/-]+$", coalesce(var.config_s3_uri, "-"))))
    error_message = "config_s3_uri: null or s3://<bucket>/<key>, the key of A-Z a-z 0-9 ! _ . ' ( ) / - (no * or ?, which IAM would read as wildcards)."
  }
}

variable "config_file_system_id" {
  description = "EFS file system whose root holds the config, mounted read-only at /etc/readyprobe (null - the config is baked into the image or read from config_s3_uri)."
  type        = string
  default     = null
  validation {
    condition     = var.config_file_system_id == null || can(regex("^fs-[0-9a-f]{8,40}$", var.config_file_system_id))
    error_message = "config_file_system_id: null or an EFS file system id (fs-...)."
  }
}

variable "evidence_bucket" {
  description = "S3 bucket of the config's [evidence.s3] (null - evidence stays on the task's volume): the task role may PutObject under evidence_prefix and ListBucket for that prefix only."
  type        = string
  default     = null
  validation {
    condition     = var.evidence_bucket == null || can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", coalesce(var.evidence_bucket, "-")))
    error_message = "evidence_bucket: null or an S3 bucket name (3-63 of a-z 0-9 . -)."
  }
}

variable "evidence_prefix" {
  description = "The config's [evidence.s3] prefix."
  type        = string
  default     = "readyprobe/evidence/"
  validation {
    condition     = can(regex("^[A-Za-z0-9!_.'()/-]{0,512}$", var.evidence_prefix))
    error_message = "evidence_prefix: up to 512 of A-Z a-z 0-9 ! _ . ' ( ) / - (no * or ?, which IAM would read as wildcards)."
  }
}

variable "state_bucket" {
  description = "S3 bucket of the state store (the config's [state.s3] bucket)."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.state_bucket))
    error_message = "state_bucket: an S3 bucket name (3-63 of a-z 0-9 . -)."
  }
}

variable "state_prefix" {
  description = "The config's [state.s3] key_prefix."
  type        = string
  default     = "readyprobe/"
  validation {
    condition     = can(regex("^[A-Za-z0-9!_.'()/-]{0,512}$", var.state_prefix))
    error_message = "state_prefix: up to 512 of A-Z a-z 0-9 ! _ . ' ( ) / - (no * or ?, which IAM would read as wildcards)."
  }
}

variable "probe_secret" {
  description = "The Secrets Manager secret the config names in password = { secrets_manager = ..., json_key = ... }: its name (an RDS-managed one starts with rds!) or full ARN. The prober reads it with the task role and refreshes it, so a rotation needs no restart; the task role may GetSecretValue on that secret only (null - none)."
  type        = string
  default     = null
  validation {
    condition     = var.probe_secret == null || can(regex("^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:[A-Za-z0-9/_+=.@!-]+$", coalesce(var.probe_secret, "-"))) || (length(coalesce(var.probe_secret, "-")) <= 512 && can(regex("^[A-Za-z0-9/_+=.@!-]+$", coalesce(var.probe_secret, "-"))))
    error_message = "probe_secret: null, a Secrets Manager secret name (up to 512 of A-Z a-z 0-9 / _ + = . @ ! -) or a secret ARN."
  }
}

variable "rds_iam_db_users" {
  description = "The database users the config logs in as with password = { rds_iam = { region = ... } }, as rds-db ARNs (arn:aws:rds-db:REGION:ACCOUNT:dbuser:DbiResourceId/USER, a cluster's resource id starts with cluster-): the task role may rds-db:connect as those users only (empty - none)."
  type        = list(string)
  default     = []
  nullable    = false
  validation {
    condition     = alltrue([for a in var.rds_iam_db_users : can(regex("^arn:aws[a-z-]*:rds-db:[a-z0-9-]+:[0-9]{12}:dbuser:(cluster|db)-[A-Z0-9]+/[A-Za-z0-9_.@-]{1,80}$", a))])
    error_message = "rds_iam_db_users: each an rds-db ARN, arn:aws:rds-db:REGION:ACCOUNT:dbuser:DbiResourceId/USER (no wildcards)."
  }
}

variable "probe_secret_json_key" {
  description = "The key of the secret's JSON value that holds the password (\"password\" for an RDS-managed secret; null - the whole SecretString). Goes into the password_config output."
  type        = string
  default     = null
  validation {
    condition     = var.probe_secret_json_key == null || can(regex("^[A-Za-z0-9_.-]{1,128}$", coalesce(var.probe_secret_json_key, "-")))
    error_message = "probe_secret_json_key: null or 1-128 of A-Z a-z 0-9 _ . -"
  }
}

variable "probe_secret_kms_key_arn" {
  description = "The customer managed KMS key that encrypts probe_secret (null - the AWS managed key aws/secretsmanager, which needs no grant): the task role may kms:Decrypt with it through Secrets Manager only."
  type        = string
  default     = null
  validation {
    condition     = var.probe_secret_kms_key_arn == null || can(regex("^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/[A-Za-z0-9-]{1,64}$", coalesce(var.probe_secret_kms_key_arn, "-")))
    error_message = "probe_secret_kms_key_arn: null or a KMS key ARN (arn:...:key/<id>)."
  }
}

variable "architecture" {
  description = "CPU architecture of the image and the tasks (ECS runtimePlatform.cpuArchitecture): X86_64 or ARM64 (Graviton, cheaper per vCPU-hour)."
  type        = string
  default     = "X86_64"
  validation {
    condition     = contains(["X86_64", "ARM64"], var.architecture)
    error_message = "architecture: X86_64 or ARM64."
  }
}

variable "log_retention_days" {
  description = "Retention of the prober's log group (logs, EMF metrics)."
  type        = number
  default     = 30
  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 3653], var.log_retention_days)
    error_message = "log_retention_days: a value CloudWatch Logs accepts."
  }
}
