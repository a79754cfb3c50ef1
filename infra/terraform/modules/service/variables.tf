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

variable "alarms_only" {
  description = "true: the alarms only, no health check or record - region B's call for branches in two regions (give its region_alarms to the other call's other_region_alarms)."
  type        = bool
  default     = false
  nullable    = false
  validation {
    condition     = contains([true, false], var.alarms_only)
    error_message = "alarms_only: true or false."
  }
}

variable "other_region_alarms" {
  description = "Branches in two regions: region_alarms of this module's call in region B (alarms_only there), whose alarms B's prober feeds. Each branch's record then follows a CALCULATED check of this region's and B's alarm, each child Healthy without data (docs/deploy.md, regional failover). null: one region."
  type = object({
    region      = string
    alarm_names = map(string)
  })
  default = null
  validation {
    condition     = var.other_region_alarms == null || can(regex("^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-[0-9]$", try(var.other_region_alarms.region, "-")))
    error_message = "other_region_alarms: null, or region_alarms of a call in another region (region an AWS region name)."
  }
}
