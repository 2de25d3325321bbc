--[[
carma's job_submit.lua: Slurm shards from a job's GPU memory.

Written by `carma slurm hooks`, which fills in the constants below (this file in the
repository is the template). Install it next to slurm.conf and set JobSubmitPlugins=lua.

A job whose --comment starts with "carma:" gets its shard request computed here:
  sbatch --comment carma:mem=12GiB ...             declared memory per GPU
  sbatch --comment carma:summary=PATH,bs=32 ...    a model summary: carma estimates it
  (carma sbatch writes carma:...,need=MIB itself; need is then used as is)
shards = ceil((memory + margin) / shard size); the job gets --gres=shard:N (replacing any
shard request), --requeue, and need=MIB in its comment for the node's hooks. A request that
no GPU can hold, a malformed comment, or a whole-GPU request next to a carma comment is
refused with one line. Every other job passes untouched.

The estimate needs carma's networks, which Lua cannot run: for summary= this script runs
`carma slurm shards --parsable` through io.popen. io.popen goes through /bin/sh, so nothing
reaches the command line unless it passed a strict check first: the summary path must be
absolute and made of letters, digits, '.', '_', '-' and '/' only; the batch size and the
user id are digits; the carma path and numbers below were checked when this file was
written. carma then reads the summary only if the submitting user owns it (--owner-uid), so
SlurmUser's rights do not leak. slurmctld waits for this call (about 10 ms per estimate);
declared memory is computed here in Lua, without a process.
]]

local SHARD_MIB = @SHARD_MIB@
local MARGIN_MIB = @MARGIN_MIB@
local SHARDS_PER_GPU = @SHARDS_PER_GPU@
local CARMA = "@CARMA@"
local MEMORY_MIB_MAX = 1048576

-- Bytes per unit, as carma's spec::parse_memory_mib reads them.
local UNIT_BYTES = {
    [""] = 1048576, MiB = 1048576, M = 1048576, Mi = 1048576,
    B = 1,
    KiB = 1024, K = 1024, Ki = 1024,
    GiB = 1073741824, G = 1073741824, Gi = 1073741824,
    TiB = 1099511627776, T = 1099511627776, Ti = 1099511627776,
    KB = 1e3, kB = 1e3, MB = 1e6, GB = 1e9, TB = 1e12,
}

local KEYS = { mem = true, summary = true, bs = true, need = true, retries = true, submit = true }

local function memory_mib(text)
    local number, unit = string.match(text, "^%s*([%d%.]+)%s*(%a*)%s*$")
    local value = number and tonumber(number)
    if not value or #number > 20 then
        return nil, "memory " .. text .. " is not a size; use e.g. 12GiB or 500MiB"
    end
    local bytes = UNIT_BYTES[unit]
    if not bytes then
        return nil, "memory " .. text .. " has an unknown unit " .. unit .. "; use e.g. 12GiB or 500MiB"
    end
    local mib = math.ceil(value * bytes / 1048576)
    if mib < 1 or mib > MEMORY_MIB_MAX then
        return nil, "memory " .. text .. " must be between 1 MiB and 1 TiB"
    end
    return mib
end

local function whole(key, text, min, max)
    local n = string.match(text, "^%d+$") and #text <= 15 and tonumber(text)
    if not n or n < min or n > max then
        return nil, key .. "=" .. text .. " is not a whole number from " .. min .. " to " .. max
    end
    return n
end

-- The comment's fields, with the grammar of carma's slurm::comment.
local function parse_comment(comment)
    local fields = {}
    local body = string.sub(comment, 7)
    for item in string.gmatch(body .. ",", "([^,]*),") do
        local key, value = string.match(item, "^([^=]+)=(.+)$")
        if not key then
            return nil, item .. " is not KEY=VALUE; write e.g. carma:mem=12GiB"
        end
        if not KEYS[key] then
            return nil, "unknown key " .. key .. "; use mem, summary, bs, need, retries or submit"
        end
        if fields[key] then
            return nil, "key " .. key .. " appears twice; give it once"
        end
        fields[key] = value
    end
    return fields
end

local function safe_path(path)
    return #path <= 1024 and string.match(path, "^/[A-Za-z0-9%._/%-]*$") ~= nil
end

-- carma's estimate of a summary: returns shards, need or nil, message.
local function estimate(summary, bs, uid)
    if not safe_path(summary) then
        return nil, "summary path " .. summary .. " must be absolute, at most 1024 bytes, and use only letters, digits, '.', '_', '-' and '/'"
    end
    local batch, err = whole("bs", bs or "", 1, 1000000)
    if not batch then
        return nil, bs and err or "summary= needs bs=BATCH_SIZE"
    end
    local command = CARMA .. " slurm shards --parsable --owner-uid " .. string.format("%d", uid)
        .. " --shard-mib " .. SHARD_MIB .. " --margin-mib " .. MARGIN_MIB
        .. " --model-summary " .. summary .. " --batch-size " .. string.format("%d", batch) .. " 2>&1"
    local pipe = io.popen(command)
    if not pipe then
        return nil, "could not run " .. CARMA
    end
    local out = pipe:read("*a") or ""
    pipe:close()
    local shards, need = string.match(out, "^(%d+) (%d+)%s*$")
    if not shards then
        local line = string.match(out, "^[^\n]*") or ""
        return nil, (string.gsub(line, "^error: ", ""))
    end
    return tonumber(shards), tonumber(need)
end

local function asks_whole_gpus(job_desc)
    for _, field in ipairs({ "tres_per_node", "tres_per_job", "tres_per_socket", "tres_per_task" }) do
        local value = job_desc[field]
        if value and string.find(value, "gpu", 1, true) then
            return true
        end
    end
    return false
end

local function refuse(message)
    slurm.log_user("%s", "carma: " .. message)
    return slurm.ERROR
end

function slurm_job_submit(job_desc, part_list, submit_uid)
    local comment = job_desc.comment
    if comment == nil or string.sub(comment, 1, 6) ~= "carma:" then
        return slurm.SUCCESS
    end
    local fields, err = parse_comment(comment)
    if not fields then
        return refuse(err)
    end
    if asks_whole_gpus(job_desc) then
        return refuse("a job with a carma: comment gets a share of a GPU as shards; remove --gres=gpu/--gpus")
    end
    local need
    if fields.need then
        need, err = whole("need", fields.need, 1, MEMORY_MIB_MAX)
    elseif fields.mem then
        need, err = memory_mib(fields.mem)
    elseif fields.summary then
        local estimated, detail = estimate(fields.summary, fields.bs, submit_uid)
        if not estimated then
            return refuse(detail)
        end
        need = detail
    else
        err = "give the memory: carma:mem=12GiB or carma:summary=PATH,bs=BATCH"
    end
    if not need then
        return refuse(err)
    end
    local shards = math.max(1, math.ceil((need + MARGIN_MIB) / SHARD_MIB))
    if shards > SHARDS_PER_GPU then
        return refuse(string.format(
            "%d MiB + %d MiB margin needs shard:%d, but one GPU holds %d shards of %d MiB; lower the memory or the batch size",
            need, MARGIN_MIB, shards, SHARDS_PER_GPU, SHARD_MIB))
    end
    job_desc.tres_per_node = string.format("gres:shard:%d", shards)
    job_desc.requeue = 1
    if not fields.need then
        job_desc.comment = comment .. string.format(",need=%d", need)
    end
    slurm.log_info("carma: job from uid %d gets shard:%d for %d MiB", submit_uid, shards, need)
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end

return slurm.SUCCESS
