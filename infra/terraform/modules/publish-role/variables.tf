variable "trusted_role_arns" {
  description = "The probers' task role ARNs (the root module's task_role_arn output, in the probers' account): only they may assume the role."
  type        = list(string)
  validation {
    condition     = length(var.trusted_role_arns) >= 1 && alltrue([for r in var.trusted_role_arns : can(regex("^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]+$", r)) && length(r) <= 600])
    error_message = "trusted_role_arns: at least one IAM role ARN (arn:<partition>:iam::<12 digits>:role/<path/name>)."
  }
}

variable "external_id" {
  description = "The config's external_id: an AssumeRole without it is refused."
  type        = string
  validation {
    condition     = length(var.external_id) >= 2 && length(var.external_id) <= 1224 && can(regex("^[A-Za-z0-9+=,.@:/-]+$", var.external_id))
    error_message = "external_id: 2-1224 of A-Z a-z 0-9 + = , . @ : / -"
  }
}

variable "role_name" {
  description = "The role's name, so that its ARN (the config's role_arn) is known before it exists: arn:<partition>:iam::<this account>:role/<role_name>."
  type        = string
  default     = "readyprobe-publish"
  validation {
    condition     = can(regex("^[A-Za-z0-9+=,.@_-]{1,64}$", var.role_name))
    error_message = "role_name: 1-64 of A-Z a-z 0-9 + = , . @ _ -"
  }
}

variable "namespaces" {
  description = "The namespaces the services publishing here use: the config's publish.namespace and each such [[service]] namespace. The role may publish only there."
  type        = list(string)
  default     = ["Readyprobe"]
  validation {
    condition     = length(var.namespaces) >= 1 && alltrue([for n in var.namespaces : can(regex("^[0-9A-Za-z.\\-_/#: ]{1,255}$", n)) && !startswith(n, "AWS/") && !startswith(n, ":")])
    error_message = "namespaces: at least one; each 1-255 of 0-9 A-Z a-z . - _ / # : and space, not starting with AWS/ or :"
  }
}
