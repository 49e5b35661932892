/** The ACL docs/fleet.md gives (a test below keeps the two equal). */
export const FLEET_ACL = `# dispatch: every device's commands, status and replies
user dispatch
topic write fleet/+/cmd/#
topic read fleet/+/status
topic read fleet/+/reply/#

# each device (its user name is its device id): its own topics only
pattern read fleet/%u/cmd/#
pattern write fleet/%u/status
pattern write fleet/%u/reply/#
`;
