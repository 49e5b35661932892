/**
 * The code lists a milestone is checked against before it leaves the truck. The service
 * keeps its own lists (the spec does not print them); the industry default is ANSI X12 214:
 * shipment status codes (AT7 element 01) for `eventCode`, status reason codes (AT7 element
 * 02) for `reasonCode`. They are two lists: `X3` is an event, `NS` a reason, and a reason
 * code sent as an event is refused by the service a day later as a dead letter. Each list
 * is the config's default (`codes.events`, `codes.reasons`) and can be extended there.
 */

/** X12 214 AT7-01 shipment status codes used by truckload and LTL carriers. */
export const EVENT_CODES: Readonly<Record<string, string>> = {
  A3: 'shipment returned to shipper',
  A7: 'refused by consignee',
  A9: 'shipment damaged',
  AA: 'pick-up appointment date and/or time',
  AB: 'delivery appointment date and/or time',
  AF: 'carrier departed pick-up location with shipment',
  AG: 'estimated delivery',
  AH: 'attempted delivery',
  AI: 'shipment has been reconsigned',
  AJ: 'tendered for delivery',
  AM: 'loaded on truck',
  AP: 'delivery not completed',
  AV: 'available for delivery',
  B6: 'estimated to arrive at carrier terminal',
  BA: 'connecting line or cartage pick-up',
  C1: 'estimated to depart terminal location',
  CA: 'shipment cancelled',
  CD: 'carrier departed delivery location',
  CL: 'trailer closed out',
  CP: 'completed loading at pick-up location',
  D1: 'completed unloading at delivery location',
  I1: 'in-gate',
  J1: 'delivered to connecting line',
  K1: 'arrived at customs',
  L1: 'loading',
  OA: 'out-gate',
  P1: 'departed terminal location',
  R1: 'received from prior carrier',
  S1: "trailer spotted at consignee's location",
  SD: 'shipment delayed',
  X1: 'arrived at delivery location',
  X2: "estimated date and/or time of arrival at consignee's location",
  X3: 'arrived at pick-up location',
  X4: 'arrived at terminal location',
  X5: 'arrived at delivery location loading dock',
  X6: 'en route to delivery location',
  X8: 'arrived at pick-up location loading dock',
  XB: 'shipment acknowledged',
};

/** X12 214 AT7-02 shipment status or appointment reason codes. */
export const REASON_CODES: Readonly<Record<string, string>> = {
  NS: 'normal status',
  NA: 'normal appointment',
  A1: 'missed delivery',
  A2: 'incorrect address',
  A5: 'unable to locate',
  AD: 'customer requested future delivery',
  AF: 'accident',
  AG: 'consignee related',
  AH: 'driver related',
  AI: 'mechanical breakdown',
  AJ: 'other carrier related',
  AL: 'previous stop',
  AM: 'shipper related',
  AN: 'holiday - closed',
  AO: 'weather or natural disaster related',
  AS: 'hold due to customs documentation problems',
  AW: 'past cut-off time',
  AX: 'insufficient pick-up time',
  AY: 'missed pick-up',
  B1: 'consignee closed',
  B5: 'held for consignee',
  B8: 'improper unloading facility or equipment',
  B9: 'receiving time restricted',
  BB: 'held per shipper',
  BC: 'missing documents',
  BD: 'border clearance',
  BE: 'road conditions',
  BG: 'other',
  BH: 'insufficient time to complete delivery',
  BJ: 'customer wanted earlier delivery',
  BK: 'prearranged appointment',
  BP: 'load shifted',
  BQ: 'shipment overweight',
  BS: 'refused by customer',
  C1: 'waiting for customer pick-up',
  C2: 'credit hold',
  C6: 'waiting shipping instructions',
  D1: 'carrier dispatch error',
  D2: 'driver not available',
  HB: 'held pending appointment',
};

/** `resourceType` values the service is seen to accept, in their exact case. */
export const RESOURCE_TYPES = ['Truck', 'Trailer', 'Driver'] as const;
export type ResourceType = (typeof RESOURCE_TYPES)[number];

/** `trailer` -> `Trailer`; undefined for anything that is not one of the three. */
export function resourceTypeOf(text: string): ResourceType | undefined {
  const t = text.trim().toLowerCase();
  return RESOURCE_TYPES.find((r) => r.toLowerCase() === t);
}

/** The default load number rule: what the service is seen to accept. */
export const DEFAULT_LOAD_NUMBER_PATTERN = '^[A-Za-z0-9-]{1,35}$';
